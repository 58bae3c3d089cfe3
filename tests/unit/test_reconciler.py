"""The reconciler's sweeps against the in-memory ports: each repair, and that repairing twice changes nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sitedispatch import observability as obs
from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.model import Kind, PublicationStatus, Status
from sitedispatch.domain.ports import CounterReading
from sitedispatch.drivers.reference.content import parse_gmt
from sitedispatch.flow.admission import running_group_for
from sitedispatch.publication.live import live_key
from tests.factories import present
from tests.unit.conftest import FIXTURES, OPERATOR, Harness, reconciler, sweep


def global_total(counters: dict[str, int]) -> int:
    """The global limit's shards, summed."""
    return sum(value for name, value in counters.items() if name == "global" or name.startswith("global#"))


def test_drifted_counters_are_set_to_the_recount_once_they_are_quiet(harness: Harness) -> None:
    queued = harness.submit(site="one")
    harness.deliver(harness.submit(site="two"))
    db = harness.world.db
    exact = dict(db.counters)
    # Drift, as a bug or a hand edit would leave it: one leaked slot and a lost decrement
    db.bump("site#two", +1, harness.world.clock.now())
    leaked = "running#operations#tenant-a#tenant-a#1"
    db.bump(leaked, +1, harness.world.clock.now())
    db.bump(present(harness.world.operations.get(queued)).holds[1], -1, harness.world.clock.now())

    assert sweep(harness)["counters_repaired"] == 0  # moved just now: left alone
    harness.world.clock.advance(121)
    assert sweep(harness)["counters_repaired"] == 3

    assert db.counters == exact | {leaked: exact.get(leaked, 0)}  # the leaked shard back at what it held
    assert exact["site#one"] == 1 and global_total(exact) == 1 and harness.world.operations.get(queued)
    assert sweep(harness)["counters_repaired"] == 0  # nothing left to repair


def test_a_counter_that_moves_during_the_recount_is_not_overwritten(harness: Harness) -> None:
    harness.submit(site="one")
    harness.world.clock.advance(200)
    db = harness.world.db
    read_counters = harness.world.operations.held_counters  # what the recount reads: the counters moved lately

    def counters_then_a_submit_lands() -> dict[str, CounterReading]:
        seen = read_counters()
        harness.submit(site="one", kind="publish", params={})  # lands between the read and the recount
        return seen

    harness.world.operations.held_counters = counters_then_a_submit_lands  # type: ignore[method-assign]
    repaired = reconciler(harness).repair_counters()  # read 1, recounts 2: the write is refused, not forced

    assert repaired == 0
    assert db.counters["site#one"] == 2 and global_total(db.counters) == 2


def test_an_operation_read_under_two_statuses_or_none_is_counted_once(harness: Harness) -> None:
    """The recount reads the statuses one after another; a long operation moving meanwhile is read twice (queued,
    then running) or not at all, while its other counters stay quiet. Neither read may move a counter: found by the
    simulation (seeds 13176 and 84207 of its first 100,000), where such a recount set a global shard to 2 for one
    operation, or to 0 under one still running, and its finish left the counter at 1 or -1."""
    op_id = harness.submit(site="one")
    harness.world.clock.advance(600)  # every counter of the operation quiet since its submit
    db, exact = harness.world.db, dict(harness.world.db.counters)
    queued = present(harness.world.operations.get(op_id))
    running = replace(queued, status=Status.RUNNING, updated_at=harness.world.clock.now())

    assert reconciler(harness).repair_counters(outstanding=[queued, running]) == 0  # read twice
    assert reconciler(harness).repair_counters(outstanding=[]) == 0  # read under neither: the second read has it
    assert db.counters == exact

    db.bump("site#one", +1, harness.world.clock.now() - 600)  # a real drift, quiet as long
    assert reconciler(harness).repair_counters(outstanding=[queued, running]) == 1
    assert db.counters == exact


def test_an_attempt_that_outlives_its_lease_is_failed_requeued_and_can_never_commit(harness: Harness) -> None:
    """The fencing argument in one process: the attempt stalls (a GC pause, SIGSTOP) past its lease, the reconciler
    fails it and another delivery commits; when the stalled attempt resumes, its commit is refused."""
    harness.provisioned()
    op_id = harness.submit(kind="publish", params={}, key="stalls")
    seen: dict[str, Any] = {}

    def stall_past_the_lease(inner: Any, ctx: Any, payload: Any) -> Any:
        if "stalled" not in seen:
            seen["stalled"] = ctx.lease.fence
            harness.world.clock.advance(harness.settings.lease_seconds + 10)
            seen["sweep"] = sweep(harness)
            op = harness.world.operations.get(op_id)
            seen["after_sweep"] = (op.status, op.error.code if op.error else None)  # type: ignore[union-attr]
            seen["takeover"] = harness.deliver(op_id)[0]  # the re-sent message, another environment
        return inner(ctx, payload)

    harness.wrap(Kind.PUBLISH, stall_past_the_lease)
    resumed, _ = harness.deliver(op_id)

    assert seen["sweep"]["stale_leases_recovered"] == 1
    assert seen["after_sweep"] == (Status.QUEUED, "lease_expired")
    assert seen["takeover"].outcome == Outcome.SUCCEEDED
    # the commit record the takeover wrote refuses the stale attempt's: it learns the effect already happened
    assert (resumed.outcome, resumed.reason) == (Outcome.SUCCEEDED, "already_committed")
    commits = [c for c in harness.world.db.commits.values() if c.operation_id == op_id]
    assert len(commits) == 1 and commits[0].fence > seen["stalled"]
    op = harness.world.operations.get(op_id)
    assert op is not None and op.status == Status.SUCCEEDED and op.attempt == 2
    assert harness.world.db.total("running#operations#tenant-a#tenant-a") == 0  # the stale attempt's slot came back
    assert sweep(harness)["stale_leases_recovered"] == 0


def test_a_running_operation_with_a_live_lease_is_left_alone(harness: Harness) -> None:
    op_id = harness.submit()
    op = present(harness.world.operations.get(op_id))
    lease = harness.world.sites.claim_lease("acme-blog", op_id, harness.world.clock.now(), 60)
    harness.world.operations.start_attempt(
        op_id, lease.fence, harness.world.clock.now(), running_group_for(harness.settings, op).home_slot(op_id)
    )
    harness.world.clock.advance(30)

    assert sweep(harness)["stale_leases_recovered"] == 0
    assert harness.world.operations.get(op_id).status == Status.RUNNING  # type: ignore[union-attr]


def test_orphans_accepted_without_a_send_or_queued_and_untouched_are_sent_again(harness: Harness) -> None:
    sent_op = harness.submit(site="one")
    harness.world.queue.sent.clear()  # the message was lost
    harness.world.clock.advance(3_601)

    assert sweep(harness)["orphans_resent"] == 1
    assert [m.message.operation_id for m in harness.world.queue.sent] == [sent_op]
    assert harness.deliver(sent_op)[0].outcome == Outcome.SUCCEEDED


def test_a_publication_whose_messages_were_lost_is_resumed_and_goes_live_once() -> None:
    harness = Harness(publication_chunk_routes=2)
    harness.provisioned()
    harness.import_file(FIXTURES / "fixture-1.2.xml")
    publisher = harness.publisher()
    plan = harness.world.publication_queue.sent.pop(0)
    publisher.process(plan)  # planned: chunk messages sent
    chunks = list(harness.world.publication_queue.sent)
    assert len(chunks) >= 3
    harness.world.publication_queue.sent.clear()
    publisher.process(chunks[0])  # one chunk done, the others' messages lost
    pending = harness.world.publications.get("acme-blog", 2)
    assert pending is not None and pending.total_chunks == len(chunks) and pending.finished_at is None

    assert sweep(harness)["publications_resumed"] == 0  # not stalled yet
    harness.world.clock.advance(301)
    assert sweep(harness)["publications_resumed"] == 1
    assert sorted(m.chunk for m in harness.world.publication_queue.sent) == [m.chunk for m in chunks[1:]]
    harness.drain_publications()

    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.live_seq == 2
    assert harness.world.publications.get("acme-blog", 2).status == PublicationStatus.PUBLISHED  # type: ignore
    assert sweep(harness)["publications_resumed"] == 0


def test_live_json_behind_the_live_pointer_is_rewritten(harness: Harness) -> None:
    harness.provisioned()
    harness.world.blobs.objects.pop(live_key("acme-blog"))  # the publisher died after promoting

    assert sweep(harness)["live_pointers_repaired"] == 1
    document = json.loads(harness.world.blobs.get(live_key("acme-blog")))
    assert document["seq"] == 1 and document["revision_id"] == harness.world.sites.get("acme-blog").live_revision  # type: ignore[union-attr]
    assert sweep(harness)["live_pointers_repaired"] == 0


def test_wp_events_submits_one_wp_cron_per_site_and_due_minute(harness: Harness) -> None:
    harness.provisioned()
    harness.import_file(FIXTURES / "fixture-1.2.xml")  # has a post scheduled for 2030-06-01 12:00 UTC
    harness.provisioned("quiet-site")
    harness.deliver(harness.submit(site="quiet-site", kind="wp_cron", params={}, key="catch-up"))
    quiet = harness.world.sites.get("quiet-site")
    assert quiet is not None and quiet.next_due_at is not None and quiet.next_due_at > harness.world.clock.now()

    harness.world.clock.t = parse_gmt("2030-06-01 12:00:30")
    first = sweep(harness, "wp-events")
    second = sweep(harness, "wp-events")  # the same minute: the same idempotency key

    assert first["wp_cron_submitted"] == 2 and second["wp_cron_exists"] == 2 and second["wp_cron_submitted"] == 0
    crons = [
        op
        for op in harness.world.db.operations.values()
        if op.kind == Kind.WP_CRON and op.epoch == 0 and op.idempotency_key.startswith("wp-events:")
    ]
    assert sorted(op.site_id for op in crons) == ["acme-blog", "quiet-site"]
    [mine] = [op for op in crons if op.site_id == "acme-blog"]
    result, _ = harness.deliver(mine.operation_id)
    assert result.outcome == Outcome.SUCCEEDED and len(result.commit.summary["published_posts"]) == 1  # type: ignore
    after = harness.world.sites.get("acme-blog")
    assert after is not None and after.next_due_at is not None and after.next_due_at > harness.world.clock.now()


def test_queue_repair_removes_dead_letters_of_operations_no_longer_dead(harness: Harness) -> None:
    dead = [harness.submit(site=harness.registered(f"site-{n}"), kind="publish", params={}) for n in range(2)]
    for op_id in dead:
        assert harness.deliver(op_id)[0].outcome == Outcome.DEAD  # registered, never provisioned
    letters = list(harness.world.queue.dead)
    harness.controls().replay(OPERATOR, dead[0])
    # its DLQ message was out of the replay's reach (a FIFO group held by another reader): still there
    harness.world.queue.dead = letters

    repaired = sweep(harness, "queue-repair")

    assert repaired["dlq_stale_removed"] == 1 and repaired["dlq_depth_operations"] == 1
    assert [m.attributes["operation_id"] for m in harness.world.queue.dead] == [dead[1]]
    assert sweep(harness, "queue-repair")["dlq_stale_removed"] == 0


def test_an_unknown_schedule_is_skipped(harness: Harness) -> None:
    assert reconciler(harness).run("nonsense") is None


def test_index_reads_that_lag_the_table_never_undo_work(harness: Harness) -> None:
    """DynamoDB's by-status index is eventually consistent: the sweeps may see an operation as it was a moment ago.
    Every action they take on an index read is re-checked by a conditional write on the row, so a stale view is
    only a wasted look."""
    db = harness.world.db
    db.lagging_indexes = True
    # Given an operation that the index last saw running, and that has committed since
    op_id = harness.submit()
    harness.world.operations.start_attempt(op_id, 1, harness.world.clock.now())
    db.propagate()
    db.operations[op_id] = replace(db.operations[op_id], status=Status.QUEUED, fence=None, attempt=0)
    result, _ = harness.deliver(op_id)
    assert result.outcome == Outcome.SUCCEEDED
    assert [o.status for o in harness.world.operations.list(status=Status.RUNNING)] == [Status.RUNNING]  # stale
    # and a newer submit the index has not seen yet (its counters moved just now)
    harness.submit(site="other")
    # past the stale-lease grace (the index's RUNNING row now looks abandoned), within the counters' quiet period:
    # the recount relies on index lag being shorter than that (120 s; DynamoDB's is typically under a second)
    harness.world.clock.advance(harness.settings.lease_seconds + 10)
    sent_before = len(harness.world.queue.sent)

    repaired = sweep(harness)

    # Then the succeeded operation is left as it is, nothing is sent for it, and no counter is "repaired" to a
    # recount made from the stale index (the counters moved within the quiet period)
    assert present(harness.world.operations.get(op_id)).status == Status.SUCCEEDED
    assert repaired["stale_leases_recovered"] == 0 and repaired["counters_repaired"] == 0
    assert [m.message.operation_id for m in harness.world.queue.sent[sent_before:]] == []


def test_one_failing_step_stops_no_other_and_is_logged_counted_and_named(
    harness: Harness, monkeypatch: Any, caplog: Any
) -> None:
    """A repair that raises (here the unsent-groups step, as a call its role is not granted would) is named in the
    sweep, logged with its cause and counted; the orphans before it and the events and counters after it are
    repaired in the same sweep."""
    # Given a lost message (an orphan) and a step that fails
    sent_op = harness.submit(site="one")
    harness.world.queue.sent.clear()
    harness.world.clock.advance(3_601)

    def denied(*_: Any, **__: Any) -> Any:
        raise RuntimeError("AccessDenied: dynamodb:Query on the operations table")

    monkeypatch.setattr(harness.world.operations, "unsent", denied)
    counted: list[str] = []
    monkeypatch.setattr(obs, "count", lambda name, value=1: counted.append(str(name)))

    # When the reconcile sweep runs
    result = reconciler(harness).run("reconcile")

    # Then the failing step is named, and every other step ran
    assert result is not None and result.failed == ["unsent_groups_sent"]
    assert result.repaired["orphans_resent"] == 1 and "unsent_groups_sent" not in result.repaired
    for later in ("stale_leases_recovered", "publications_resumed", "live_pointers_repaired", "events_resent"):
        assert later in result.repaired, later
    assert "counters_repaired" in result.repaired and "webhooks_woken" in result.repaired
    assert [m.message.operation_id for m in harness.world.queue.sent] == [sent_op]
    [failure] = [r for r in caplog.records if r.getMessage() == "reconcile step failed"]
    assert failure.step == "unsent_groups_sent" and "AccessDenied" in failure.error
    assert failure.exc_info is not None  # with its traceback
    assert counted.count(obs.Metric.ReconcileStepFailed) == 1


def test_when_the_in_flight_read_fails_the_steps_that_need_it_fail_with_it_and_the_rest_run(
    harness: Harness, monkeypatch: Any
) -> None:
    def throttled(*_: Any, **__: Any) -> Any:
        raise RuntimeError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(harness.world.operations, "list", throttled)

    result = reconciler(harness).run("reconcile")

    assert result is not None
    assert result.failed == [
        "in_flight_read",
        "orphans_resent",
        "waiting_released",
        "stale_leases_recovered",
        "counters_repaired",
    ]
    assert set(result.repaired) == {
        "unsent_groups_sent",
        "publications_resumed",
        "live_pointers_repaired",
        "events_resent",
        "webhooks_woken",
    }
