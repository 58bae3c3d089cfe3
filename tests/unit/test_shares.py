"""A principal's share of a lane's queue: beyond it, operations wait unsent and are sent oldest first as earlier
ones end (by the worker that ends one, an operator's cancel, or the reconciler for a release a race left undone)."""

from __future__ import annotations

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import PermanentError
from sitedispatch.domain.model import Kind, QueueMessage, Status
from sitedispatch.flow.counters import SHARE_PER_RUNNING_SLOT
from tests.factories import present
from tests.fakes import RecordingVisibility
from tests.unit.conftest import OPERATOR, Harness
from tests.unit.test_reconciler import reconciler

SHARE = "queued#operations#tenant-a#tenant-a"


def sent_ids(harness: Harness) -> list[str]:
    return [sent.message.operation_id for sent in harness.world.queue.sent]


def flood(harness: Harness, n: int, principal: str = "tenant-a") -> list[str]:
    return [harness.submit(site=f"{principal}-site-{i}", principal=principal) for i in range(n)]


def test_beyond_its_share_a_principals_operations_wait_unsent_and_others_are_sent_at_once() -> None:
    harness = Harness(max_running_per_principal=2)
    share = SHARE_PER_RUNNING_SLOT * 2
    ops = flood(harness, 7)
    b = harness.submit(site="b-site", principal="tenant-b")

    assert sent_ids(harness) == [*ops[:share], b]  # B's is right behind A's share, not behind A's whole flood
    for op_id in ops[share:]:
        op = present(harness.world.operations.get(op_id))
        assert op.status == Status.ACCEPTED and op.waiting_for == SHARE and op.queued_at is None
    assert harness.world.db.total(SHARE) == share and harness.world.db.waiting_total(SHARE) == 3
    assert harness.world.db.waiting_total("queued#operations#tenant-b#tenant-b") == 0


def test_each_end_sends_the_oldest_waiting_one_so_the_share_stays_full_and_in_order() -> None:
    harness = Harness(max_running_per_principal=1)
    ops = flood(harness, 6)
    harness.world.queue.sent.clear()
    harness.fail_first(Kind.PROVISION, PermanentError("bad input", code="bad_input"))

    ended = [harness.deliver(op_id)[0].outcome for op_id in ops[:2]]  # one dies, one commits

    assert ended == [Outcome.DEAD, Outcome.SUCCEEDED]
    assert sent_ids(harness) == ops[2:4]  # released oldest first, one per end
    assert [present(harness.world.operations.get(o)).status for o in ops[2:4]] == [Status.QUEUED] * 2
    assert harness.world.db.total(SHARE) == 2 and harness.world.db.waiting_total(SHARE) == 2
    for op_id in ops[2:]:  # and so on until nothing waits
        assert harness.deliver(op_id)[0].outcome == Outcome.SUCCEEDED
    assert sent_ids(harness) == ops[2:]
    assert harness.world.db.total(SHARE) == 0 and harness.world.db.waiting_total(SHARE) == 0


def test_a_message_of_a_waiting_operation_runs_nothing() -> None:
    """Only a release sends a waiting operation; a message that reaches one anyway (sent by hand, or an older
    version's resend) is acknowledged without an attempt: the release sends it again."""
    harness = Harness(max_running_per_principal=1)
    ops = flood(harness, 3)
    result, _ = harness.deliver(ops[2])
    assert (result.outcome, result.reason) == (Outcome.ACKED, "waiting_for_share")
    op = present(harness.world.operations.get(ops[2]))
    assert op.attempt == 0 and op.waiting_for == SHARE


def test_cancelling_a_waiting_operation_ends_it_at_once_and_cancelling_a_sent_one_releases_the_next() -> None:
    harness = Harness(max_running_per_principal=1)
    ops = flood(harness, 4)
    harness.world.queue.sent.clear()
    controls = harness.controls()

    assert controls.cancel(OPERATOR, ops[3], "not needed").status == Status.CANCELLED  # waiting: nothing sent
    assert harness.world.queue.sent == [] and harness.world.db.waiting_total(SHARE) == 1
    assert controls.cancel(OPERATOR, ops[0], "not needed").status == Status.CANCELLED  # sent: frees a place
    assert sent_ids(harness) == [ops[2]]
    assert harness.world.db.total(SHARE) == 2 and harness.world.db.waiting_total(SHARE) == 0
    assert harness.world.db.total("principal#tenant-a") == 2


def test_the_reconciler_releases_what_a_finish_left_waiting_and_never_sends_a_waiting_one_as_an_orphan() -> None:
    harness = Harness(max_running_per_principal=1)
    ops = flood(harness, 4)
    harness.world.queue.sent.clear()
    # an end whose read saw nobody waiting (as a message from before shares carried no principal): no release
    op = present(harness.world.operations.get(ops[0]))
    result = harness.worker().process(QueueMessage(op.operation_id, op.site_id), RecordingVisibility())
    assert result.outcome == Outcome.SUCCEEDED and harness.world.queue.sent == []
    harness.world.clock.advance(600)  # far past the orphan grace: a waiting operation is still not an orphan

    sweep = reconciler(harness).reconcile()

    assert sweep.repaired["waiting_released"] == 1 and sweep.repaired["orphans_resent"] == 0
    assert sent_ids(harness) == [ops[2]]
    assert present(harness.world.operations.get(ops[3])).waiting_for == SHARE
    assert reconciler(harness).reconcile().repaired["waiting_released"] == 0  # the share is full again


def test_the_recount_counts_sent_operations_on_the_share_and_waiting_ones_not() -> None:
    harness = Harness(max_running_per_principal=1)
    flood(harness, 5)
    harness.world.db.counters[f"{SHARE}#0"] = harness.world.db.counters.get(f"{SHARE}#0", 0) + 5  # drifted
    harness.world.clock.advance(3_600)
    assert reconciler(harness).reconcile().repaired["counters_repaired"] == 1
    assert harness.world.db.total(SHARE) == 2


def test_a_redriven_operation_waits_when_its_principals_share_is_full() -> None:
    harness = Harness(max_running_per_principal=1)
    harness.fail_first(Kind.PROVISION, PermanentError("bad input", code="bad_input"))
    dead = harness.submit(site="dead-site")
    assert harness.deliver(dead)[0].outcome == Outcome.DEAD
    flood(harness, 2)
    harness.world.queue.sent.clear()

    harness.controls().redrive(OPERATOR, operation_id=dead, reason="fixed")

    redriven = present(harness.world.operations.get(dead))
    assert redriven.status == Status.ACCEPTED and redriven.waiting_for == SHARE and redriven.epoch == 1
    assert harness.world.queue.sent == []
