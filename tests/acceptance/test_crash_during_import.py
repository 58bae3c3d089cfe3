"""G2/G4 with real processes: a worker SIGKILLed in the middle of a long import in steps; the previous publication
stays completely readable throughout; after a restart the import completes with exactly one commit, continued from
its last checkpoint, having spent one attempt for the kill and none for its continuations."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Kind, Status
from sitedispatch.domain.settings import Settings
from sitedispatch.drivers.reference.content import body_key
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.publication.live import read_live_route, receipt_key
from tests.acceptance.conftest import wait_for
from tests.factories import PROVISION, present

POSTS = 900  # 8 steps of 120


class Reader(threading.Thread):
    """Reads every route of the site's live revision in a loop; records failures and the live seqs it saw."""

    def __init__(self, deps: Dependencies, site: str) -> None:
        super().__init__(daemon=True)
        self.deps, self.site = deps, site
        self.stop = threading.Event()
        self.reads = 0
        self.failures: list[str] = []
        self.seqs: list[int] = []

    def run(self) -> None:
        """Every failure is recorded for the test to assert on (an assertion here would only end this thread)."""
        while not self.stop.is_set():
            try:
                self.read_every_route()
            except Exception as exc:
                self.failures.append(f"the live revision: {exc!r}")

    def read_every_route(self) -> None:
        record = self.deps.sites.get(self.site)
        if record is None or not record.live_revision:
            raise LookupError(f"site {self.site} has no live revision")
        self.seqs.append(record.live_seq)
        receipt = json.loads(self.deps.blobs.get(receipt_key(self.site, record.live_revision)))
        for entry in receipt["routes"]:
            try:
                read_live_route(self.deps.sites, self.deps.blobs, self.site, entry["route"])
                self.reads += 1
            except Exception as exc:
                self.failures.append(f"{entry['route']}: {exc!r}")


def bodies_written(deps: Dependencies, site: str) -> int:
    prefix = body_key(site, "x").rsplit("/", 1)[0] + "/"
    listed = deps.s3.list_objects_v2(Bucket=deps.settings.bucket, Prefix=prefix, MaxKeys=1000)
    return int(listed.get("KeyCount", 0))


@pytest.mark.guarantee
@pytest.mark.strict_suffices
def test_sigkill_mid_import_then_restart_commits_once_and_readers_never_fail(
    runtime: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a provisioned, published site and a long import in steps of 120 items (lease 3 s, kept alive by
    # heartbeats while the worker lives; with a 10 s function timeout and 10 s steps, every invocation has time for
    # one step only, then hands over to the next: a continuation)
    policy = {"lease_seconds": 3, "import_step_items": 120, "import_step_s": 10}
    env = runtime.start_cloud(0, function_timeout_s=10, policy=policy)
    runtime.start_worker("operations", 1)
    worker = runtime.start_worker("bulk", 1)  # imports travel in the bulk lane
    runtime.start_worker("publications", 2)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()
    submitter = deps.submitter()
    submitter.submit(kind="provision", site_id="crash-site", principal="p", params=PROVISION)
    wait_for(
        lambda: (s := deps.sites.get("crash-site")) is not None and s.live_seq == 1,
        timeout_s=30,
        what="first publication live",
    )
    # the site names a shared dependency with no cap: the import's start checks its breaker (a ConditionCheck)
    deps.sites.set_dependencies("crash-site", ("db:shared",))
    wxr = tmp_path / "long.xml"
    write_wxr(wxr, posts=POSTS, seed=7)
    reader = Reader(deps, "crash-site")
    reader.start()
    op_id = submitter.submit(
        kind="import", site_id="crash-site", principal="p", params=submitter.stage_upload("crash-site", wxr, "p")
    ).operation.operation_id

    # When the worker is SIGKILLed while the import is running
    wait_for(
        lambda: present(deps.operations.get(op_id)).status == Status.RUNNING,
        timeout_s=30,
        interval_s=0.05,
        what="import running",
    )
    # at a seeded instant inside the import: once it has written that many of its post bodies (the provision: 2)
    kill_after = random.Random(11).randint(150, POSTS - 150)
    wait_for(
        lambda: bodies_written(deps, "crash-site") >= kill_after,
        timeout_s=30,
        interval_s=0.02,
        what="import writing post bodies",
    )
    runtime.kill(worker)
    killed_at = time.time()
    assert present(deps.operations.get(op_id)).status == Status.RUNNING
    # killed between two invocations (its step recorded as a continuation), the next one spends no attempt;
    # killed inside a step, the next attempt (one spent) resumes from the last checkpoint
    handed_over = present(deps.operations.get(op_id)).continuing
    assert deps.commits.get(op_id) is None

    # Then a restarted worker completes it once the lease and visibility lapse
    runtime.start_worker("bulk", 1)
    final = wait_for(
        lambda: (op := deps.operations.get(op_id)) is not None and op.status.terminal and op,
        timeout_s=90,
        what="import terminal after restart",
    )
    wait_for(lambda: present(deps.sites.get("crash-site")).live_seq == 2, timeout_s=60, what="import published")
    reader.stop.set()
    reader.join(30)

    assert final.status == Status.SUCCEEDED and final.attempt == (1 if handed_over else 2)
    assert present(deps.sites.get("crash-site")).head_version == 2 and deps.commits.get(op_id) is not None
    history = wait_for(  # newest first: the import once, after the provision (an index: eventually consistent)
        lambda: len(h := deps.commits.history("crash-site")) == 2 and h, timeout_s=5, what="history"
    )
    assert [(c.kind, c.version) for c in history] == [(Kind.IMPORT, 2), (Kind.PROVISION, 1)]
    assert history[0].operation_id == op_id
    summary = present(deps.commits.get(op_id)).summary
    assert summary["created"] == {"post": POSTS}  # no item twice
    assert summary["steps"] >= 8 and summary["resumed_from_step"] >= 1  # continued, never restarted from item 1
    assert present(final.fence) - 1 >= summary["steps"]  # an invocation per step (each under the next fence)
    assert reader.failures == [] and reader.reads > 0
    assert reader.seqs == sorted(reader.seqs)  # live seq never decreased
    print(
        f"\nkilled after {kill_after} bodies (handed over: {handed_over}), "
        f"recovered {present(final.finished_at) - killed_at:.1f}s after the kill; "
        f"{summary['steps']} steps, fence {final.fence}; {reader.reads} reads, 0 failures"
    )
