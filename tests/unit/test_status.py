"""The fleet's status from its flow counters: the backlog it reports is the backlog the operation rows hold, per
status, principal, lane and tenant and site, while operations wait, queue, run and die; a principal sees its own."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sitedispatch.domain.errors import PermanentError
from sitedispatch.domain.model import BULK, INTERACTIVE, Kind, Status, lane_for
from sitedispatch.operator.status import StatusReport, collect_status
from tests.factories import PROVISION
from tests.unit.conftest import Harness
from tests.unit.test_import import FIXTURES


class QueueAttributes:
    """SQS's attributes as the world's queues hold them: each DLQ's depth (the lanes' depths are SQS's own
    figures; what is checked here is the backlog)."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness

    def get_queue_attributes(self, QueueUrl: str, **_: Any) -> dict[str, dict[str, str]]:
        s = self.harness.settings
        lane = {s.operations_dlq_url: INTERACTIVE, s.bulk_dlq_url: BULK}.get(QueueUrl)
        dead = sum(letter.lane == lane for letter in self.harness.world.queue.dead)
        return {"Attributes": {"ApproximateNumberOfMessages": str(dead)} if lane else {}}


def report(harness: Harness, principal: str | None = None, sites_shown: bool = True) -> StatusReport:
    w = harness.world
    return collect_status(
        QueueAttributes(harness),
        harness.settings,
        w.operations,
        w.sites,
        harness.pace(),
        w.clock.now(),
        principal,
        sites_shown,
    )


def unfinished(harness: Harness, principal: str | None = None) -> list[Any]:
    return [
        op
        for op in harness.world.db.operations.values()
        if not op.status.terminal and principal in (None, op.principal)
    ]


def assert_counts_match_the_rows(harness: Harness, principal: str | None = None) -> StatusReport:
    status = report(harness, principal)
    rows = unfinished(harness, principal)
    assert status.backlog_by_status == {
        s.value: sum(op.status == s for op in rows) for s in (Status.ACCEPTED, Status.QUEUED, Status.RUNNING)
    }
    assert status.backlog_by_principal == dict(sorted(Counter(op.principal for op in rows).items()))
    by_key = Counter((op.principal, op.tenant_key, lane_for(op.kind)) for op in rows)
    assert {(d.principal, d.tenant or d.principal, d.lane): d.backlog for d in status.delay_by_principal} == dict(
        by_key
    )
    assert {d.site_id: d.backlog for d in status.delay_by_site} == dict(Counter(op.site_id for op in rows))
    return status


def submit(harness: Harness, n: int, principal: str, tenant: str | None = None) -> list[str]:
    """n provisions of n sites of the principal's (tenant's)."""
    return [
        harness.submitter.submit(
            kind="provision", site_id=f"{tenant or principal}-{i}", principal=principal, params=PROVISION, tenant=tenant
        ).operation.operation_id
        for i in range(n)
    ]


def test_the_backlog_is_the_rows_backlog_while_operations_wait_queue_run_and_end() -> None:
    harness = Harness(max_running_per_principal=1)  # a share of 2 per lane and fairness key: the rest wait
    control = submit(harness, 5, "control-plane", "customer-1")
    submit(harness, 3, "control-plane", "customer-2")
    submit(harness, 1, "solo")
    harness.world.clock.advance(30)
    upload = harness.submitter.stage_upload("solo-0", FIXTURES / "fixture-1.2.xml", "solo")
    harness.submitter.submit(kind="import", site_id="solo-0", principal="solo", params=upload)

    status = assert_counts_match_the_rows(harness)
    assert status.backlog_by_status == {"accepted": 4, "queued": 6, "running": 0}  # 3 + 1 wait beyond their shares
    assert {(d.tenant, d.lane): d.backlog for d in status.delay_by_principal if d.principal == "control-plane"} == {
        ("customer-1", INTERACTIVE): 5,
        ("customer-2", INTERACTIVE): 3,
    }
    rows = {row.queue: row for row in status.queues}
    oldest = min(op.updated_at for op in unfinished(harness) if lane_for(op.kind) == INTERACTIVE)
    assert rows[INTERACTIVE].oldest_age_s == harness.world.clock.now() - oldest
    assert rows[BULK].oldest_age_s == 0 and rows[INTERACTIVE].dlq_oldest_age_s is None

    seen: list[StatusReport] = []

    def while_running(inner: Any, ctx: Any, payload: Any) -> Any:
        seen.append(assert_counts_match_the_rows(harness))
        return inner(ctx, payload)

    harness.wrap(Kind.PROVISION, while_running)
    harness.deliver(control[0])
    assert seen[0].backlog_by_status["running"] == 1
    harness.fail_first(Kind.PROVISION, PermanentError("bad input", code="bad_input"))
    harness.world.clock.advance(5)
    harness.deliver(control[1])  # dies: its place is released and the next waiting one is sent
    after = assert_counts_match_the_rows(harness)
    assert after.backlog_by_principal["control-plane"] == 6
    assert {row.queue: row for row in after.queues}[INTERACTIVE].dlq_oldest_age_s == 0

    without_sites = report(harness, sites_shown=False)  # no site counter read: the same counts, no site rows
    assert without_sites.delay_by_site == [] and without_sites.backlog_by_status == after.backlog_by_status
    assert without_sites.delay_by_principal == after.delay_by_principal and without_sites.queues == after.queues

    mine = assert_counts_match_the_rows(harness, "solo")
    assert mine.backlog_by_principal == {"solo": 2} and {d.principal for d in mine.delay_by_principal} == {"solo"}
    assert {d.site_id for d in mine.delay_by_site} == {"solo-0"}
    assert mine.queues == after.queues  # the queue rows are the deployment's
