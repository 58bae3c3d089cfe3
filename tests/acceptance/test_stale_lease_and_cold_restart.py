"""G3 and G6 with real processes: a worker paused past its lease cannot commit after it resumes (the fencing-token
argument), and a cold restart of every worker with a backlog in flight loses nothing and duplicates nothing."""

from __future__ import annotations

import signal
import time
from functools import partial

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.resources import visibility_timeout_s
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime
from tests.acceptance.conftest import as_function, wait_for
from tests.factories import PROVISION, present

LEASE_S = 3
FUNCTION_TIMEOUT_S = 20


def history_is(deps: Dependencies, site: str, expected: list[str]) -> bool:
    return [c.operation_id for c in deps.commits.history(site)] == expected


def connect(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Dependencies:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Dependencies(Settings()).warm()


@pytest.mark.guarantee
@pytest.mark.strict_suffices
def test_a_worker_stopped_past_its_lease_cannot_commit_when_it_resumes(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = runtime.start_cloud(0, function_timeout_s=120, policy={"lease_seconds": LEASE_S, "reference_latency_s": 6})
    stalled = runtime.start_worker("operations", 1)
    runtime.start_worker("publications", 1)
    deps = connect(env, monkeypatch)
    op_id = (
        deps.submitter()
        .submit(kind="provision", site_id="stall-site", principal="p", params=PROVISION)
        .operation.operation_id
    )
    first = wait_for(
        lambda: (op := deps.operations.get(op_id)) is not None and op.status == Status.RUNNING and op,
        timeout_s=30,
        interval_s=0.05,
        what="provision running",
    )

    # When its worker is stopped (SIGSTOP: a GC pause, a frozen VM) past the lease
    stalled.signal_group(signal.SIGSTOP)
    wait_for(
        lambda: (s := deps.sites.get("stall-site")) is not None and (s.lease_expires_at or 0) < time.time() - 6,
        timeout_s=30,
        what="lease expired past the reconciler's grace",
    )
    sweep = as_function(runtime, "reconciler").reconciler().run("reconcile")
    assert sweep is not None and sweep.repaired["stale_leases_recovered"] == 1
    assert deps.operations.get(op_id).status == Status.QUEUED  # type: ignore[union-attr]

    # Then another worker takes the operation over and commits it
    runtime.start_worker("operations", 1)
    done = wait_for(
        lambda: (op := deps.operations.get(op_id)) is not None and op.status.terminal and op,
        timeout_s=60,
        what="takeover committed",
    )
    # and the stalled worker, resumed, finds its fence stale and commits nothing
    stalled.signal_group(signal.SIGCONT)
    wait_for(
        lambda: b"lease lost before commit" in stalled.log.read_bytes(),
        timeout_s=30,
        what="the resumed worker to notice it lost the lease",
    )

    commits = wait_for(  # the history is an index: a read may lag the takeover's commit
        lambda: (h := deps.commits.history("stall-site")) and [c.operation_id for c in h] == [op_id] and h,
        timeout_s=5,
        what="stall-site's history: the takeover's one commit",
    )
    assert done.status == Status.SUCCEEDED and done.attempt == 2
    assert [c.operation_id for c in commits] == [op_id] and commits[0].fence > (first.fence or 0)
    assert deps.sites.get("stall-site").head_version == 1  # type: ignore[union-attr]
    assert deps.operations.counter("running#operations#p") == 0


@pytest.mark.guarantee
@pytest.mark.strict_suffices
def test_a_cold_restart_with_a_backlog_in_flight_ends_every_operation_once(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker killed between its receive and its first visibility change (the core ties visibility to the lease
    # right before the claim) leaves that message hidden for the queue's visibility timeout, as on AWS: the function
    # timeout is short so that window costs this test two minutes at worst, not twelve.
    env = runtime.start_cloud(
        0, function_timeout_s=FUNCTION_TIMEOUT_S, policy={"lease_seconds": LEASE_S, "reference_latency_s": 2}
    )
    workers = [runtime.start_worker("operations", 3), runtime.start_worker("publications", 2)]
    deps = connect(env, monkeypatch)
    submitter = deps.submitter()
    sites = [f"cold-{n:02d}" for n in range(12)]
    accepted = [
        submitter.submit(kind="provision", site_id=site, principal="p", params=PROVISION).operation.operation_id
        for site in sites
    ]

    # (read row by row: a query of the status index may lag, and two queries may see it at different moments)
    def running() -> list[str]:
        return [o for o in accepted if present(deps.operations.get(o)).status == Status.RUNNING]

    wait_for(lambda: len(running()) >= 2, timeout_s=30, interval_s=0.05, what="a backlog in flight")

    # When every worker dies at once (the cloud, which holds the durable state, stays up)
    for worker in workers:
        runtime.kill(worker)
    in_flight = running()
    runtime.start_worker("operations", 3)
    runtime.start_worker("publications", 2)

    # Then every accepted operation ends terminal, each with exactly one commit
    finals = wait_for(
        lambda: (
            all((op := deps.operations.get(o)) is not None and op.status.terminal for o in accepted)
            and [deps.operations.get(o) for o in accepted]
        ),
        timeout_s=visibility_timeout_s(FUNCTION_TIMEOUT_S) + 90,
        what="every accepted operation terminal",
    )
    assert {op.status for op in finals if op is not None} == {Status.SUCCEEDED}
    for site, op_id in zip(sites, accepted, strict=True):
        # one commit: the site's row (read consistently) is at version 1, its commit is the operation's (by key)
        assert present(deps.sites.get(site)).head_version == 1 and deps.commits.get(op_id) is not None
        # and the history (an index: eventually consistent on AWS and on the strict local cloud) shows just it
        wait_for(partial(history_is, deps, site, [op_id]), timeout_s=5, what=f"{site}'s history: its one commit")
    assert in_flight and all(deps.operations.get(o).attempt >= 2 for o in in_flight)  # type: ignore[union-attr]
    # A publication message the killed publication worker had received stays hidden for its queue's visibility
    # timeout from that receive (as on AWS), then goes to the new worker: wait what SQS promises, not less.
    wait_for(
        lambda: all((s := deps.sites.get(site)) is not None and s.live_seq == 1 for site in sites),
        timeout_s=visibility_timeout_s(FUNCTION_TIMEOUT_S) + 60,
        what="every site published",
    )
    assert deps.operations.counter("global") == 0 and deps.operations.counter("running#operations#p") == 0
