"""The fleet model's arithmetic on cases small enough to work out by hand."""

from __future__ import annotations

import pytest

from bench.simulation import (
    AwsLimits,
    Durations,
    FifoLane,
    cron_fleet_provision_s,
    cron_publication_latencies_s,
    percentile,
    queue_fleet_provision_s,
    queue_publication_latencies_s,
)

WARM = AwsLimits(max_concurrency=4, cold_start_s=0.0, initial_environments=4, high_throughput=False)
D = Durations(operation_s=2.0, hop_s=0.0)


def test_the_cron_does_one_site_a_minute() -> None:
    assert cron_fleet_provision_s(10, D) == 9 * 60 + 2.0
    latencies = cron_publication_latencies_s(3, 50, Durations(route_s=0.0, finish_s=0.0))
    assert latencies == [49 * 3 * 60.0, (49 * 3 + 1) * 60.0, (49 * 3 + 2) * 60.0]


def test_sites_submitted_over_time_start_as_they_arrive() -> None:
    # 8 sites arriving one a second, 4 environments, 2 s each: never more than 2 at once, the last done at 7 + 2
    assert queue_fleet_provision_s(8, WARM, D, arrivals=[float(i) for i in range(8)]) == pytest.approx(9.0, abs=0.05)
    # arriving faster than they drain: the backlog sets the end: two waves of 4, the fourth starting at 3/70 s
    assert queue_fleet_provision_s(8, WARM, D, arrivals=[i / 70 for i in range(8)]) == pytest.approx(4 + 3 / 70)


def test_sites_run_in_waves_of_the_concurrency_cap() -> None:
    assert queue_fleet_provision_s(4, WARM, D) == pytest.approx(2.0, abs=0.02)
    assert queue_fleet_provision_s(8, WARM, D) == pytest.approx(4.0, abs=0.05)
    assert queue_fleet_provision_s(9, WARM, D) == pytest.approx(6.0, abs=0.05)


def test_one_site_runs_one_message_at_a_time_and_cold_starts_are_paid_once() -> None:
    lane = FifoLane(AwsLimits(max_concurrency=4, cold_start_s=1.0, initial_environments=4))
    first = lane.run(0.0, "site-a", 2.0, 0.0)
    second = lane.run(0.0, "site-a", 2.0, 0.0)  # same group: waits, then a warm environment
    other = lane.run(0.0, "site-b", 2.0, 0.0)  # another group: in parallel, a new (cold) environment
    assert first == pytest.approx(3.0, abs=0.01) and second == pytest.approx(5.0, abs=0.01)
    assert other == pytest.approx(3.0, abs=0.01)


def test_throughput_and_scaling_limits_bite() -> None:
    slow = AwsLimits(
        max_concurrency=1000, fifo_tps=10.0, high_throughput=False, cold_start_s=0.0, initial_environments=1000
    )
    assert queue_fleet_provision_s(100, slow, Durations(operation_s=0.0, hop_s=0.0)) == pytest.approx(9.9, abs=0.01)
    ramp = AwsLimits(max_concurrency=1000, cold_start_s=0.0, initial_environments=5, scale_up_per_minute=60)
    # 65 sites of 1 s: five environments at once, one more each second: 5T + T^2/2 = 65 gives T of about 8 s
    assert queue_fleet_provision_s(65, ramp, Durations(operation_s=1.0, hop_s=0.0)) == pytest.approx(8.0, abs=0.6)


def test_a_publication_renders_its_chunks_in_parallel() -> None:
    d = Durations(publish_operation_s=0.0, plan_s=0.0, route_s=0.1, finish_s=0.0, hop_s=0.0)
    [one] = queue_publication_latencies_s(1, 50, WARM, d)
    assert one == pytest.approx(2.5, abs=0.01)  # two chunks of 25 routes side by side, not 50 routes in a row
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
