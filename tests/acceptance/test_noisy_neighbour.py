"""Fairness on the local runtime, across lanes and within one: principal A floods 300 imports across its sites, or
200 provisions in the interactive lane; principal B's single provision still starts within two operation-times,
because bulk work has its own lane and a principal runs at most its share of a lane's environments."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.synthetic import write_wxr
from tests.acceptance.conftest import wait_for
from tests.factories import PROVISION, present

pytestmark = pytest.mark.acceptance
A_SITES = [f"tenant-a-{n}" for n in range(6)]


def test_one_provision_is_not_starved_by_three_hundred_imports(
    runtime: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = runtime.start_cloud(0, policy={"max_outstanding_per_principal": 400})
    runtime.start_worker("operations", 2)
    runtime.start_worker("publications", 2)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()
    submitter = deps.submitter()
    for site in A_SITES:
        submitter.submit(kind="provision", site_id=site, principal="tenant-a", params=PROVISION)
    wait_for(
        lambda: all((s := deps.sites.get(site)) is not None and s.head_version >= 1 for site in A_SITES),
        timeout_s=60,
        what="tenant A's sites provisioned",
    )

    # Given tenant A's 300 imports (50 per site, the site limit) queued in the bulk lane
    wxr = tmp_path / "a.xml"
    write_wxr(wxr, posts=150, seed=3)
    staged = {site: submitter.stage_upload(site, wxr, "tenant-a") for site in A_SITES}
    with ThreadPoolExecutor(8) as pool:  # submitted concurrently, as a producer's flood arrives
        imports = list(
            pool.map(
                lambda site: (
                    submitter.submit(kind="import", site_id=site, principal="tenant-a", params=staged[site]).operation
                ),
                [site for _ in range(50) for site in A_SITES],
            )
        )
    assert len(imports) == 300
    runtime.start_worker("bulk", 2)  # the flood starts draining
    wait_for(
        lambda: (
            sum(
                1 for op in imports[:12] if (o := deps.operations.get(op.operation_id)) and o.status == Status.SUCCEEDED
            )
            >= 2
        ),
        timeout_s=120,
        what="A's imports under way",
    )

    # When tenant B submits one provision
    backlog = len(deps.operations.list(status=Status.QUEUED, limit=1000))
    b = submitter.submit(kind="provision", site_id="tenant-b-site", principal="tenant-b", params=PROVISION).operation
    done = wait_for(
        lambda: (o := deps.operations.get(b.operation_id)) is not None and o.status.terminal and o,
        timeout_s=60,
        what="B's provision finished",
    )

    # Then it started within two operation-times of its submission
    finished = [
        o
        for op in imports
        if (o := deps.operations.get(op.operation_id)) is not None
        and o.status == Status.SUCCEEDED
        and o.started_at
        and o.finished_at
    ]
    operation_time = statistics.median(
        o.finished_at - o.started_at for o in finished if o.finished_at is not None and o.started_at is not None
    )
    assert done.started_at is not None and done.queued_at is not None
    waited = done.started_at - done.queued_at
    print(f"\nB waited {waited:.2f}s; an import takes {operation_time:.2f}s; A's backlog then {backlog}")
    assert done.status == Status.SUCCEEDED
    assert backlog > 200  # A's flood was still there
    assert waited <= 2 * operation_time


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="within one lane the running cap defers a principal's over-cap deliveries one at a time, at the consumer: "
    "a newcomer waits for one pass over the backlog queued ahead of it (about 0.15 s per message per free "
    "environment here), not two operation times; holding over-cap work out of the queue is the fix, not built",
)
def test_within_one_lane_a_principals_flood_does_not_delay_anothers_one(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running cap per principal (here 2 of the lane's 4 environments) is what keeps a lane fair: principal A's
    flood of interactive provisions takes at most its share, so B's single one waits about an operation time. (With
    the default cap of 10, A would hold all four environments and B would wait behind ~100 provisions: ~30 s.)"""
    latency_s = 1.0
    env = runtime.start_cloud(0, policy={"reference_latency_s": latency_s, "max_running_per_principal": 2})
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()
    submitter = deps.submitter()

    # Given tenant A's burst of 100 provisions in the interactive lane, and right behind it tenant B's one, all queued
    # before the lane's environments start (so the order in the FIFO queue is fixed: B is last)
    with ThreadPoolExecutor(8) as pool:
        flood = list(
            pool.map(
                lambda n: (
                    submitter.submit(
                        kind="provision", site_id=f"flood-{n}", principal="tenant-a", params=PROVISION
                    ).operation
                ),
                range(100),
            )
        )
    b = submitter.submit(kind="provision", site_id="tenant-b-own", principal="tenant-b", params=PROVISION).operation

    # When the lane starts (four environments; A may run two at a time)
    runtime.start_worker("operations", 4)
    lane_up = time.time()
    done = wait_for(
        lambda: (o := deps.operations.get(b.operation_id)) is not None and o.status.terminal and o,
        timeout_s=60,
        what="B's provision finished",
    )

    # Then it started within about two operation times of the lane starting, while most of A's burst still waits
    durations = [
        o.finished_at - o.started_at
        for op in flood
        if (o := deps.operations.get(op.operation_id)) is not None
        and o.status == Status.SUCCEEDED
        and o.started_at is not None
        and o.finished_at is not None
    ]
    operation_time = statistics.median(durations)
    waited = present(done.started_at) - lane_up
    waiting = sum(1 for op in flood if not present(deps.operations.get(op.operation_id)).status.terminal)
    print(f"\nB waited {waited:.2f}s; a provision takes {operation_time:.2f}s; A still had {waiting} waiting")
    assert done.status == Status.SUCCEEDED
    assert operation_time >= latency_s
    assert waiting >= 50  # the burst was still there: B did not simply run after it
    assert waited <= 2 * operation_time  # fails today (see the xfail's reason)
