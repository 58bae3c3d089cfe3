"""The dependency gate's pure decisions: GCRA's bound, caps, the breaker's states, reservations."""

from __future__ import annotations

import random

import pytest

from sitedispatch.domain.dependencies import (
    BreakerState,
    Dependency,
    DependencyReading,
    Rate,
    site_dependencies,
)
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import Kind, Operation, Status
from sitedispatch.flow.dependencies import DependencyClaim, Probe, Reserve, Wait, cap_wait, decide, rate_key


def _op(operation_id: str = "op-1", reserved: dict[str, float] | None = None) -> Operation:
    return Operation(
        operation_id, "s1", "p", Kind.PUBLISH, Status.QUEUED, "k", "d", "i", 0.0, 0.0, rate_reserved=reserved or {}
    )


def _decide(op: Operation, reading: DependencyReading, now: float, ids: tuple[str, ...] = ("db:a",)) -> object:
    return decide(op, ids, reading, now, cap_wait_s=2.0, paused_wait_s=300.0, probe_timeout_s=120.0)


def test_gcra_lets_a_burst_through_then_one_start_per_interval_and_never_more_than_the_bound_in_any_window() -> None:
    rate = Rate(limit=20, period_s=60, burst=5)
    rng = random.Random(45)
    tat: float | None = None
    starts: list[float] = []
    now = 0.0
    while now < 600:
        now += rng.expovariate(2.0)  # far more demand than the rate
        if rate.allowed_at(tat, now) <= now:
            tat = rate.after_start(tat, now)
            starts.append(now)
    assert starts[:5] == sorted(starts[:5]) and starts[4] - starts[0] < 5  # the burst at once
    for i, first in enumerate(starts):
        for window in (1.0, 10.0, 60.0, 300.0):
            inside = sum(1 for t in starts[i:] if t < first + window)
            assert inside <= window / rate.interval_s + rate.burst
    assert len(starts) <= 600 / rate.interval_s + rate.burst


def test_a_site_names_at_most_four_well_formed_distinct_dependencies() -> None:
    assert site_dependencies(["db:cluster-7", "php:pool-3", "db:cluster-7"]) == ("db:cluster-7", "php:pool-3")
    for bad in (["DB:x"], ["db"], ["db:a#1"], "db:a", ["a:1", "b:1", "c:1", "d:1", "e:1"]):
        with pytest.raises(InvalidInput):
            site_dependencies(bad)


def test_a_full_cap_waits_and_says_so_and_a_cap_with_room_takes_a_group() -> None:
    reading = DependencyReading({"db:a": Dependency("db:a", max_running=4)}, running={"db:a": 4})
    waited = _decide(_op(), reading, 10.0)
    assert isinstance(waited, Wait) and waited.why == "dependency db:a: 4 of 4 running"
    room = _decide(_op(), DependencyReading({"db:a": Dependency("db:a", max_running=4)}, running={"db:a": 3}), 10.0)
    assert isinstance(room, DependencyClaim) and room.groups[0].maximum == 4 and room.gates == ()


def test_an_uncapped_dependency_still_checks_its_breaker_flag_on_one_running_shard() -> None:
    claim = _decide(_op(), DependencyReading({}), 10.0)
    assert isinstance(claim, DependencyClaim) and claim.groups == () and len(claim.gates) == 1
    assert claim.gates[0].startswith("deprun#db:a#")


def test_the_breaker_blocks_until_its_cooldown_then_elects_one_probe_and_a_pause_waits_long() -> None:
    opened = Dependency("db:a", state=BreakerState.OPEN, reason="5 failures from 3 sites", reopen_at=40.0)
    waited = _decide(_op(), DependencyReading({"db:a": opened}), 10.0)
    assert isinstance(waited, Wait) and waited.seconds == 30.0 and "probe in 30 s" in waited.why
    assert isinstance(_decide(_op(), DependencyReading({"db:a": opened}), 41.0), Probe)
    probing = Dependency("db:a", state=BreakerState.HALF_OPEN, probe="op-1", probe_at=41.0)
    assert isinstance(_decide(_op("op-1"), DependencyReading({"db:a": probing}), 50.0), DependencyClaim)
    assert isinstance(_decide(_op("op-2"), DependencyReading({"db:a": probing}), 50.0), Wait)
    assert isinstance(_decide(_op("op-2"), DependencyReading({"db:a": probing}), 200.0), Probe)  # a quiet probe
    paused = Dependency("db:a", state=BreakerState.PAUSED, reason="maintenance")
    held = _decide(_op(), DependencyReading({"db:a": paused}), 10.0)
    assert isinstance(held, Wait) and held.seconds == 300.0 and held.why == "dependency db:a paused: maintenance"


def test_a_rate_not_yet_allowing_a_start_reserves_its_exact_time_and_the_reservation_is_honoured_once() -> None:
    rate = Rate(limit=20, period_s=60, burst=1, kind=Kind.PUBLISH)
    dep = Dependency("db:a", rates=(rate,))
    bucket = rate_key("db:a", rate)
    reserved = _decide(_op(), DependencyReading({"db:a": dep}, tats={bucket: 13.0}), 10.0)
    assert isinstance(reserved, Reserve) and reserved.at == 13.0
    assert reserved.rates[0].read == 13.0 and reserved.rates[0].after == 16.0
    assert "next start in 3 s" in reserved.why
    held = _op(reserved={bucket: 13.0})
    honoured = _decide(held, DependencyReading({"db:a": dep}, tats={bucket: 16.0}), 13.5)
    assert isinstance(honoured, DependencyClaim)  # its place is taken: nothing more of the bucket, the gate only
    assert (honoured.groups, honoured.rates) == ((), ()) and len(honoured.gates) == 1
    late = _decide(held, DependencyReading({"db:a": dep}, tats={bucket: 16.0}), 17.0)  # more than an interval late
    assert isinstance(late, DependencyClaim) and late.rates[0].read == 16.0  # it takes a place again
    other_kind = Dependency("db:a", rates=(Rate(1, 3600, kind=Kind.IMPORT),))
    assert isinstance(_decide(_op(), DependencyReading({"db:a": other_kind}, tats={}), 10.0), DependencyClaim)


def test_a_long_wait_for_a_full_cap_looks_a_few_times_a_minute_not_in_a_poll() -> None:
    assert cap_wait(2.0, 1, 30.0) == 2.0
    assert cap_wait(2.0, 3, 30.0) == 8.0
    assert cap_wait(2.0, 50, 30.0) == 30.0
    assert cap_wait(None, 1, 30.0) == 30.0


def test_a_reservation_says_how_late_its_start_may_be_and_keep_its_places() -> None:
    rates = (Rate(limit=20, period_s=60, burst=1), Rate(limit=1, period_s=60, burst=1, kind=Kind.PUBLISH))
    dep = Dependency("db:a", rates=rates)
    reading = DependencyReading({"db:a": dep}, tats={rate_key("db:a", rates[1]): 100.0})
    reserved = _decide(_op(), reading, 10.0)
    assert isinstance(reserved, Reserve) and reserved.at == 100.0 and reserved.honoured_s == 3.0  # 60 / 20
