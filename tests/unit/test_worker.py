"""The operations worker against in-memory ports: claim, attempt, handler, fenced commit, retries, dead letters."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sitedispatch.domain.backoff import backoff_ceiling
from sitedispatch.domain.delivery import Outcome, Result
from sitedispatch.domain.errors import PermanentError, TransientError
from sitedispatch.domain.model import Kind, QueueMessage, Status
from sitedispatch.kinds.contract import HandlerContext, Mutation
from sitedispatch.kinds.handlers import HandlerFn
from tests.factories import present
from tests.fakes import RecordingVisibility
from tests.unit.conftest import Harness


def test_provision_commits_version_one_with_wordpress_defaults(harness: Harness) -> None:
    op_id = harness.submit()
    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.SUCCEEDED
    op = harness.world.operations.get(op_id)
    assert op is not None and op.status == Status.SUCCEEDED and op.attempt == 1
    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.head_version == 1 and site.lease_owner is None and site.fence == 1
    commit = harness.world.commits.get(op_id)
    assert commit is not None and commit.version == 1 and commit.revision_id == site.head_revision
    assert commit.summary["created"] == {
        "posts": 1,
        "pages": 2,
        "attachments": 0,
        "other": 0,
        "terms": 1,
        "authors": 1,
        "events": 4,
        "comments": 1,
    }
    # the commit wrote its publication (the outbox) in the same transaction, and the plan message went out
    publication = harness.world.publications.get("acme-blog", 1)
    assert publication is not None and publication.revision_id == commit.revision_id
    assert publication.status.value == "pending" and publication.operation_id == op_id
    [message] = harness.world.publication_queue.sent
    assert (message.site_id, message.seq, message.step) == ("acme-blog", 1, "plan")


def test_duplicate_delivery_after_success_is_acknowledged_without_work(harness: Harness) -> None:
    op_id = harness.submit()
    harness.deliver(op_id)
    fence_before = harness.world.sites.get("acme-blog").fence  # type: ignore[union-attr]

    result, visibility = harness.deliver(op_id)

    assert result.outcome == Outcome.ACKED and result.reason == "already_succeeded"
    assert harness.world.sites.get("acme-blog").fence == fence_before  # type: ignore[union-attr]
    assert visibility.changes == []
    assert len(harness.world.db.commits) == 1


def test_unknown_operation_and_site_mismatch_are_acknowledged(harness: Harness) -> None:
    from sitedispatch.domain.model import QueueMessage
    from tests.fakes import RecordingVisibility

    op_id = harness.submit()
    worker = harness.worker()
    assert worker.process(QueueMessage("op_missing", "acme-blog"), RecordingVisibility()).reason == "unknown_operation"
    assert worker.process(QueueMessage(op_id, "other-site"), RecordingVisibility()).reason == "site_mismatch"
    assert harness.world.operations.get(op_id).attempt == 0  # type: ignore[union-attr]


def test_lease_held_by_another_operation_defers_without_spending_an_attempt(harness: Harness) -> None:
    op_id = harness.submit()
    harness.world.sites.claim_lease("acme-blog", "op_other", harness.world.clock.now(), 45.0)

    result, visibility = harness.deliver(op_id)

    assert result.outcome == Outcome.DEFERRED and result.reason == "lease_held"
    assert harness.world.operations.get(op_id).attempt == 0  # type: ignore[union-attr]
    assert len(visibility.changes) == 1 and 0 < visibility.changes[0] <= harness.settings.defer_max_s * 1.2


def test_expired_lease_is_taken_over_with_a_higher_fence(harness: Harness) -> None:
    op_id = harness.submit()
    stale = harness.world.sites.claim_lease("acme-blog", "op_crashed", harness.world.clock.now(), 10.0)
    harness.world.clock.advance(11)

    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.SUCCEEDED
    assert result.commit is not None and result.commit.fence == stale.fence + 1
    assert harness.world.sites.release_lease(stale) is False  # the crashed holder can no longer touch the lease


def test_paused_site_defers_without_spending_an_attempt(harness: Harness) -> None:
    from dataclasses import replace

    op_id = harness.submit()
    site = harness.world.db.sites["acme-blog"]
    harness.world.db.sites["acme-blog"] = replace(site, paused=True)

    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.DEFERRED and result.reason == "site_paused"
    assert harness.world.operations.get(op_id).attempt == 0  # type: ignore[union-attr]


def test_a_paused_delivery_is_held_for_the_resume_and_one_after_the_resume_is_visible_again(harness: Harness) -> None:
    from dataclasses import replace

    from sitedispatch.domain.model import HeldDelivery

    op_id = harness.submit()
    site = harness.world.db.sites["acme-blog"]
    harness.world.db.sites["acme-blog"] = replace(site, paused=True)
    result, visibility = harness.deliver(op_id)
    assert result.reason == "site_paused" and visibility.changes[-1] > 60
    assert harness.world.sites.take_held("acme-blog") == (HeldDelivery(op_id, "operations", visibility.receipt),)

    # the site read as paused, and resumed before the worker held its delivery: visible again at once
    harness.world.sites.hold_until_resumed = lambda site_id, held: False  # type: ignore[method-assign]
    result, visibility = harness.deliver(op_id)
    assert (result.outcome, result.reason) == (Outcome.DEFERRED, "site_resumed") and visibility.changes[-1] == 0
    assert harness.world.operations.get(op_id).attempt == 0  # type: ignore[union-attr]


def test_transient_failures_retry_with_backoff_then_commit_once_on_attempt_three(harness: Harness) -> None:
    harness.fail_first(Kind.PROVISION, TransientError("database busy"), RuntimeError("connection reset"))
    op_id = harness.submit()
    worker = harness.worker(seed=3)
    delays = []
    for expected_attempt in (1, 2):
        result, visibility = harness.deliver(op_id, worker)
        assert result.outcome == Outcome.RETRYING
        op = harness.world.operations.get(op_id)
        assert op is not None and op.status == Status.QUEUED and op.attempt == expected_attempt
        assert op.error is not None and op.error.retryable
        ceiling = backoff_ceiling(expected_attempt, harness.settings.backoff_base_s, harness.settings.backoff_cap_s)
        assert 0 <= result.delay_s <= ceiling
        # visibility tied to the lease when the attempt started, then set to the backoff when it failed
        assert visibility.changes == [harness.settings.lease_seconds * 2, pytest.approx(result.delay_s)]
        assert harness.world.sites.get("acme-blog").lease_owner is None  # type: ignore[union-attr]
        delays.append(result.delay_s)
        # A redelivery before the backoff has elapsed is deferred, not run early.
        early, _ = harness.deliver(op_id, worker)
        assert early.outcome == Outcome.DEFERRED and early.reason == "backoff_pending"
        harness.world.clock.advance(result.delay_s + 0.01)

    result, _ = harness.deliver(op_id, worker)

    assert result.outcome == Outcome.SUCCEEDED
    op = harness.world.operations.get(op_id)
    assert op is not None and op.attempt == 3 and op.status == Status.SUCCEEDED and op.error is None
    assert list(harness.world.db.commits) == [op_id]


def test_permanent_failure_is_dead_after_one_attempt_and_dead_lettered(harness: Harness) -> None:
    def broken(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        raise PermanentError("theme not found", code="theme_missing")

    harness.wrap(Kind.PROVISION, broken)
    op_id = harness.submit()

    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.DEAD
    op = harness.world.operations.get(op_id)
    assert op is not None and op.status == Status.DEAD and op.attempt == 1
    assert op.error is not None and op.error.code == "theme_missing" and not op.error.retryable
    assert harness.world.db.commits == {}
    [dead] = harness.world.queue.dead
    assert dead.message.operation_id == op_id
    assert dead.attributes["error_code"] == "theme_missing" and dead.attributes["attempt"] == "1"
    assert dead.attributes["input_digest"] == op.input_digest
    assert harness.world.sites.get("acme-blog").lease_owner is None  # type: ignore[union-attr]


def test_attempt_budget_spent_goes_dead_with_the_last_error() -> None:
    harness = Harness(attempt_budget=2)

    def always(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        raise TransientError("upstream 503")

    harness.wrap(Kind.PROVISION, always)
    op_id = harness.submit()
    first, _ = harness.deliver(op_id)
    harness.world.clock.advance(first.delay_s + 1)

    second, _ = harness.deliver(op_id)

    assert (first.outcome, second.outcome) == (Outcome.RETRYING, Outcome.DEAD)
    op = harness.world.operations.get(op_id)
    assert op is not None and op.status == Status.DEAD and op.attempt == 2
    assert "budget 2 spent" in op.error.message and "upstream 503" in op.error.message  # type: ignore[union-attr]


def test_crash_loop_that_spent_the_budget_is_dead_on_next_delivery() -> None:
    harness = Harness(attempt_budget=1)
    op_id = harness.submit()
    # Given an attempt that started and crashed (the process died: no retry was recorded)
    lease = harness.world.sites.claim_lease("acme-blog", op_id, harness.world.clock.now(), 5.0)
    harness.world.operations.start_attempt(op_id, lease.fence, harness.world.clock.now())
    harness.world.clock.advance(6)

    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.DEAD and result.reason == "attempts_exhausted"
    assert harness.world.sites.get("acme-blog").lease_owner is None  # type: ignore[union-attr]


def test_provisioning_an_existing_site_is_a_permanent_failure(harness: Harness) -> None:
    harness.deliver(harness.submit(key="first"))
    second = harness.submit(key="second")

    result, _ = harness.deliver(second)

    assert result.outcome == Outcome.DEAD and result.reason == "already_provisioned"
    assert harness.world.sites.get("acme-blog").head_version == 1  # type: ignore[union-attr]


def test_holder_whose_lease_was_taken_over_cannot_commit(harness: Harness) -> None:
    """G3: the first holder stalls past its lease; a duplicate delivery takes over and commits; the stale holder's
    commit is rejected by the store's fence condition and the effect exists once."""
    op_id = harness.submit()
    stalled = threading.Event()
    resume = threading.Event()
    calls = []

    def stall_first(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        calls.append(ctx.fence)
        if len(calls) == 1:
            stalled.set()
            assert resume.wait(5)
        return inner(ctx, payload)

    harness.wrap(Kind.PROVISION, stall_first)
    outcomes: dict[str, Result] = {}
    first = threading.Thread(target=lambda: outcomes.setdefault("first", harness.deliver(op_id)[0]))
    first.start()
    assert stalled.wait(5)
    harness.world.clock.advance(harness.settings.lease_seconds + 1)  # the stalled holder's lease expires

    outcomes["second"] = harness.deliver(op_id)[0]
    resume.set()
    first.join(5)

    assert outcomes["second"].outcome == Outcome.SUCCEEDED and outcomes["second"].reason == "committed"
    # the stale holder's transaction found the commit record: it reports the effect, it did not make it
    assert outcomes["first"].reason == "already_committed"
    assert calls[1] == calls[0] + 1
    assert len(harness.world.db.commits) == 1
    assert harness.world.commits.get(op_id).fence == calls[1]  # type: ignore[union-attr]
    # and the loser's next delivery only acknowledges
    assert harness.deliver(op_id)[0].outcome == Outcome.ACKED


def test_heartbeat_extends_the_lease_during_long_work() -> None:
    harness = Harness(reference_latency_s=100.0, lease_seconds=30.0)
    op_id = harness.submit()

    result, visibility = harness.deliver(op_id)

    # 100 s of work under a 30 s lease only succeeds because heartbeats extended it (FakeClock advances in sleep).
    assert result.outcome == Outcome.SUCCEEDED
    assert len(visibility.changes) >= 100 // 30


def test_stale_holder_is_refused_by_the_fence_while_the_new_holder_is_still_working(harness: Harness) -> None:
    op_id = harness.submit()
    other = harness.submit(site="acme-blog", key="other")  # a second operation of the same site

    def taken_over_midway(inner: HandlerFn, ctx: HandlerContext, payload: Any) -> Mutation:
        mutation = inner(ctx, payload)
        harness.world.clock.advance(harness.settings.lease_seconds + 1)
        harness.world.sites.claim_lease("acme-blog", other, harness.world.clock.now(), 60.0)
        return mutation

    harness.wrap(Kind.PROVISION, taken_over_midway)

    result, visibility = harness.deliver(op_id)

    assert result.outcome == Outcome.DEFERRED and result.reason == "lease_lost:stale_fence"
    assert harness.world.db.commits == {} and visibility.changes
    site = harness.world.sites.get("acme-blog")
    assert site is not None and site.head_version == 0 and site.lease_owner == other


@pytest.mark.parametrize("path", ["one transaction", "two steps"])
def test_a_transient_failure_starting_the_attempt_gives_the_lease_back_and_looks_again_soon(
    harness: Harness, path: str
) -> None:
    """The attempt starts in one transaction with the lease claim, or (when the site or the row changed since it
    was read) in two steps: either way a transient failure leaves no lease held and no attempt spent."""
    op_id = harness.submit()
    calls = {"n": 0}

    def throttled_once(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise TransientError("throttled")
            return real(*args, **kwargs)

        return call

    store = harness.world.operations
    if path == "one transaction":
        store.claim_and_start = throttled_once(store.claim_and_start)  # type: ignore[method-assign]
    else:
        store.claim_and_start = lambda *args, **kwargs: None  # type: ignore[method-assign]
        store.start_attempt = throttled_once(store.start_attempt)  # type: ignore[method-assign]
    first, visibility = harness.deliver(op_id)

    assert (first.outcome, first.reason) == (Outcome.DEFERRED, "attempt_start_failed")
    assert visibility.changes[-1] <= harness.settings.backoff_base_s * 1.2
    assert harness.world.sites.get("acme-blog").lease_owner is None  # type: ignore[union-attr]
    assert harness.world.operations.get(op_id).attempt == 0  # type: ignore[union-attr]
    assert harness.deliver(op_id)[0].outcome == Outcome.SUCCEEDED


def test_the_message_is_tied_to_the_lease_before_the_operation_shows_running(harness: Harness) -> None:
    """A process stopped right after its claim must not hold the site's FIFO group for the queue's visibility
    timeout (12 minutes on the interactive lane): the visibility is cut to two leases before the claim lands.
    (The full suite caught the other order: a SIGSTOP timed on `running` left the takeover waiting 12 minutes.)"""
    op_id = harness.submit()
    visibility = RecordingVisibility()
    seen: dict[str, list[float]] = {}
    store = harness.world.operations
    real = store.claim_and_start

    def claim(*args: Any, **kwargs: Any) -> Any:
        seen["at_claim"] = list(visibility.changes)
        return real(*args, **kwargs)

    store.claim_and_start = claim  # type: ignore[method-assign]
    op = present(store.get(op_id))
    result = harness.worker().process(QueueMessage(op_id, op.site_id), visibility)

    assert result.outcome == Outcome.SUCCEEDED
    assert seen["at_claim"] == [harness.settings.lease_seconds * 2]
