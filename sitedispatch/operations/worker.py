"""The operations worker's core: one delivered message in, one outcome out.

Steps (DESIGN.md "Operations worker"): load, skip duplicates and terminal ones, defer paused sites and held leases
(without spending an attempt), claim the lease (fence + 1), spend an attempt, run the kind's handler, commit in one
fenced transaction. Every store write that matters is conditional in the store, never checked here first.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sitedispatch import observability as obs
from sitedispatch.domain.backoff import full_jitter
from sitedispatch.domain.delivery import Outcome, Result
from sitedispatch.domain.dependencies import DependencyRefused
from sitedispatch.domain.errors import (
    AlreadyCommitted,
    LeaseHeld,
    LimitReached,
    NotRunnable,
    PermanentError,
    StaleFence,
)
from sitedispatch.domain.model import (
    SUPERSEDABLE_KINDS,
    ErrorInfo,
    HeldDelivery,
    Kind,
    Lease,
    Operation,
    PublicationMessage,
    PublicationStatus,
    QueueMessage,
    Site,
    Status,
    lane_for,
)
from sitedispatch.domain.ports import (
    BlobStore,
    Clock,
    CommitStore,
    DependencyStore,
    OperationQueue,
    OperationStore,
    PublicationQueue,
    PublicationStore,
    SiteStore,
    Slot,
    Visibility,
)
from sitedispatch.domain.schemas import load_input
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import running_group_for
from sitedispatch.flow.counters import SHARE_SHARDS, dependency_label, share_group
from sitedispatch.flow.dependencies import DependencyClaim, key_rates_keys
from sitedispatch.flow.outcomes import Outcomes
from sitedispatch.flow.pace import Pace
from sitedispatch.flow.placement import on_a_shard
from sitedispatch.flow.retry_budget import RetryBudget
from sitedispatch.flow.shares import freed_by, hand_over, release
from sitedispatch.kinds.contract import ContinueLater, HandlerContext, SiteDriver
from sitedispatch.kinds.handlers import HandlerFn
from sitedispatch.kinds.registry import driver_for
from sitedispatch.operations.assembly import prepare_commit
from sitedispatch.operations.dependency_gate import DependencyGate, is_dependencys, ungrouped
from sitedispatch.operations.failures import count_towards_pause, dead_letter

SUPERSESSION_SCAN = 50


@dataclass
class WorkerDeps:
    settings: Settings
    operations: OperationStore
    sites: SiteStore
    commits: CommitStore
    blobs: BlobStore
    queue: OperationQueue
    clock: Clock
    handlers: dict[Kind, HandlerFn]
    rng: random.Random
    publications: PublicationStore
    publication_queue: PublicationQueue
    retry_budget: RetryBudget
    pace: Pace  # each principal's measured pace, recorded at every completion
    drivers: Mapping[str, SiteDriver]
    outcomes: Outcomes  # the fleet's successes and deaths per minute (the console's overview)
    dependencies: DependencyStore  # what sites share: caps, rates, breakers


class OperationsWorker:
    def __init__(self, deps: WorkerDeps) -> None:
        self.deps = deps
        self.request_id = ""  # of the delivery being processed (one at a time per execution environment)
        self.deadline: float | None = None  # when the invocation must have returned
        self.gate = DependencyGate(deps, self._defer)  # what a start takes of its site's dependencies
        self.share_waited: list[str] = []  # the share shards this delivery's read saw others wait for

    def process(
        self,
        message: QueueMessage,
        visibility: Visibility,
        request_id: str = "",
        deadline: float | None = None,
        receive_count: int = 1,
    ) -> Result:
        """Handle one delivery. The caller deletes the message iff `result.outcome.delete_message`.
        `request_id` (the Lambda request) goes into dead-letter evidence; `deadline` (clock time: the invocation's
        start plus the function's timeout) bounds how many steps a long operation takes in this invocation."""
        self.request_id = request_id
        self.deadline = deadline
        shares = _shares_of(message)
        rated = key_rates_keys(message.principal, message.tenant or None) if message.principal else []
        delivery = self.deps.operations.read_delivery(message.operation_id, message.site_id, shares, rated)
        self.gate.begin(receive_count, delivery.key_rates)
        self.share_waited = shares if delivery.waiting else []
        op = delivery.operation
        if op is None:
            return self._ack("unknown_operation", message)
        obs.bind(site_id=op.site_id, operation_id=op.operation_id, attempt=op.attempt)
        result = self._deliver(op, delivery.site, message, visibility)
        if result.outcome.delete_message:  # it ended, or was found ended
            self._release_waiting(op)
            self._relabel(delivery.site, message)
        return result

    def _relabel(self, site: Site | None, message: QueueMessage) -> None:
        """The site's dependencies changed since this operation took its share (of the set it named then): the
        site's counter names the new set once nothing of the site is outstanding (the end of its last operation
        does it: until then its work waits, in order, in the old set's share). A failure is logged: the next end
        tries again."""
        label = dependency_label(site.dependencies) if site is not None else message.deps
        if label == message.deps:
            return
        try:
            self.deps.operations.relabel_site(message.site_id, label)
        except Exception as exc:
            obs.logger.warning("could not relabel the site", extra={"error": _describe(exc)})

    def _deliver(self, op: Operation, site: Site | None, message: QueueMessage, visibility: Visibility) -> Result:
        if op.site_id != message.site_id:
            return self._ack("site_mismatch", message)
        if op.status.terminal:
            if op.status == Status.SUCCEEDED and "publication" in op.result:
                # The process that committed may have died before sending the publication (the outbox row exists):
                # a redelivery of the operation is the earliest chance to send it again.
                self._send_pending_publication(op.site_id, int(op.result["publication"]["seq"]))
            return self._ack(f"already_{op.status.value}", message)
        if op.waiting_for:
            return self._ack("waiting_for_share", message)  # not released yet: its release sends it again
        if site is None:
            error = ErrorInfo("PermanentError", "site_not_registered", f"site {op.site_id} is not registered", False)
            return self._dead(op, None, error, message)
        now = self.deps.clock.now()
        not_now = self._not_now(op, site, message, visibility, now)
        return not_now if not_now is not None else self._claim_and_run(op, site, message, visibility, now)

    def _release_waiting(self, op: Operation) -> None:
        """This delivery ended an operation (or found it ended) while others waited for its fairness key's share:
        the place it held goes to the oldest of them. A failure here is logged (the reconciler releases what is
        left waiting)."""
        d = self.deps
        freed = self._freed(op)
        if freed is None:
            return
        try:
            release(d.operations, d.queue, d.clock, *freed)
        except Exception as exc:
            obs.logger.warning("could not release waiting operations", extra={"error": _describe(exc)})

    def _freed(self, op: Operation) -> tuple[str, Slot] | None:
        """The share place `op` holds, when this delivery's read showed others waiting for it."""
        freed = freed_by(self.deps.settings, op)
        return freed if freed is not None and freed[1].counter in self.share_waited else None

    def _held_by_dependency(self, op: Operation, site: Site, held: Result) -> Result:
        """A start a rate of its kind alone holds (its place reserved for later) hands its share place, when the
        set's work waits for one, to the oldest of that work of another kind (flow/shares.py `hand_over`): the
        rate's kind does not hold up the rest. Any other hold keeps its place: it holds every start of the set
        alike, so the share goes on bounding how many of them are in the queue. The held message stays in the
        queue, deferred as decided. (Work on other dependencies, or none, has shares of its own.)"""
        freed = self._freed(op)  # others wait for the share
        if self.gate.held_kind is None or freed is None:
            return held
        try:
            if hand_over(self.deps.operations, self.deps.queue, self.deps.clock, op, freed[0], self.gate.held_kind):
                self.share_waited = []  # handed over: its end has no place to give
        except Exception as exc:  # the hold stands; the place is given at its end (or by the reconciler)
            obs.logger.warning("could not hand the share place over", extra={"error": _describe(exc)})
        return held

    def _not_now(
        self, op: Operation, site: Site, message: QueueMessage, visibility: Visibility, now: float
    ) -> Result | None:
        """A delivery that must not run now: a paused site, a newer operation that supersedes it, a backoff."""
        if site.paused:
            return self._held_while_paused(op, site, visibility)
        if op.kind in SUPERSEDABLE_KINDS and op.status in {Status.ACCEPTED, Status.QUEUED}:
            newer = self._newer_of_same_kind(op)
            if newer is not None:
                return self._supersede(op, newer, message)
        if op.not_before and op.not_before > now:
            return self._defer(visibility, op.not_before - now, "backoff_pending")
        return None

    def _held_while_paused(self, op: Operation, site: Site, visibility: Visibility) -> Result:
        """A long deferral (a paused site should not churn the queue: each look raises SQS's receive count), its
        receipt held with the site so that the resume wakes it; if the resume came first, visible again now."""
        d = self.deps
        deferred = self._defer(visibility, d.settings.pause_deferral_s, "site_paused")
        try:
            held = d.sites.hold_until_resumed(
                site.site_id, HeldDelivery(op.operation_id, lane_for(op.kind), visibility.receipt)
            )
        except Exception as exc:  # the deferral stands: the delivery comes back when it ends
            obs.logger.warning("could not hold the delivery for the resume", extra={"error": _describe(exc)})
            return deferred
        if held:
            return deferred
        visibility.change(0)
        return Result(Outcome.DEFERRED, "site_resumed", delay_s=0.0)

    def _claim_and_run(
        self, op: Operation, site: Site, message: QueueMessage, visibility: Visibility, now: float
    ) -> Result:
        """Claim the site's lease (fence + 1), spend an attempt under it, and run the kind's handler."""
        d = self.deps
        started = self._claim(op, site, message, visibility, now)
        if isinstance(started, Result):
            return started
        lease, op, continued = started
        obs.bind(attempt=op.attempt, fence=lease.fence)
        if op.cancel_requested:
            return self._cancelled(op, lease, message)
        if continued:
            obs.count(obs.Metric.AttemptContinued)  # the same attempt's next step: no attempt, no retry budget
        else:
            d.retry_budget.record_attempt(op.attempt, now)
            obs.count(obs.Metric.AttemptStarted)
            if op.queued_at:
                obs.seconds(obs.Metric.QueueDelay, max(0.0, now - op.queued_at))
        result = self._run(op, site, lease, message, visibility)
        if op.dependency_slots and result.outcome in {Outcome.SUCCEEDED, Outcome.RETRYING, Outcome.DEAD}:
            self.gate.released(op)  # its places of capped dependencies are free: a start they held takes one now
        return result

    def _claim(
        self, op: Operation, site: Site, message: QueueMessage, visibility: Visibility, now: float
    ) -> tuple[Lease, Operation, bool] | Result:
        """The lease and the attempt (or, for a row read `continuing`, the running attempt continued: whether it
        was), in one transaction when the site and the row are as just read (the usual case), else in two steps.
        First the message's visibility is tied to the lease (heartbeats extend both): if this process dies or stalls
        from the claim on, the message (and with it the site's FIFO group) is back within two leases rather than the
        queue's visibility timeout (6 x the function timeout: 12 minutes for the interactive lane). It comes before
        the claim, not after: a process stopped between the two would otherwise hold a running operation's group for
        those 12 minutes. A claim that fails defers, which sets it again."""
        d = self.deps
        if not site.lease_free_for(op.operation_id, now):  # held, as the consistent read just showed: no write
            return self._lease_held(visibility, site.lease_expires_at or now, now)
        gate = self.gate.decide(op, site, visibility, now)
        if isinstance(gate, Result):
            return self._held_by_dependency(op, site, gate)
        visibility.change(d.settings.lease_seconds * 2)
        # A row that still holds a running slot (its last attempt died, or it continues) keeps it: no second one.
        lease_s = d.settings.lease_seconds
        try:
            if op.running_slot is None and not op.continues:
                running = running_group_for(d.settings, op)
                started = on_a_shard(
                    d.operations,
                    running,
                    op.operation_id,
                    lambda slot: self.gate.on_shards(
                        gate,
                        op.operation_id,
                        lambda take: d.operations.claim_and_start(op, site, now, lease_s, slot, take),
                    ),
                )
            else:
                started = d.operations.claim_and_start(op, site, now, lease_s, None, ungrouped(gate))
        except DependencyRefused:
            return self._defer(visibility, 1.0, "dependency_changed")  # read again: the breaker or a bucket moved
        except LimitReached as full:
            if is_dependencys(gate, full):
                return self._held_by_dependency(op, site, self.gate.full(op, site, visibility, full, now))
            return self._principal_busy(site, visibility)  # nothing was written: no lease to give back
        except Exception as exc:
            obs.logger.warning("could not start the attempt", extra={"error": _describe(exc)})
            return self._defer(visibility, d.settings.backoff_base_s, "attempt_start_failed")
        if started is None:
            claimed = self._claim_then_start(op, site, message, visibility, now, gate)
            if isinstance(claimed, Result):
                return claimed
            started = claimed
        return (*started, op.continues)

    def _claim_then_start(
        self,
        op: Operation,
        site: Site,
        message: QueueMessage,
        visibility: Visibility,
        now: float,
        gate: DependencyClaim | None = None,
    ) -> tuple[Lease, Operation] | Result:
        """The two-step claim, when the site or the row changed since it was read: it tells apart another holder,
        an attempt that died holding its slot (kept, with what it holds of its dependencies), and an operation that
        is no longer runnable."""
        d = self.deps
        try:
            lease = d.sites.claim_lease(op.site_id, op.operation_id, now, d.settings.lease_seconds)
        except LeaseHeld as held:
            return self._lease_held(visibility, held.expires_at, now)
        try:
            if op.continues:
                return lease, d.operations.start_attempt(op.operation_id, lease.fence, now, continues_from=op.fence)
            if op.running_slot is not None:  # an attempt that died holding its slot: it keeps that one
                return lease, d.operations.start_attempt(
                    op.operation_id, lease.fence, now, current=op, dependency=ungrouped(gate)
                )
            running = running_group_for(d.settings, op)
            return lease, on_a_shard(
                d.operations,
                running,
                op.operation_id,
                lambda slot: self.gate.on_shards(
                    gate,
                    op.operation_id,
                    lambda take: d.operations.start_attempt(
                        op.operation_id, lease.fence, now, slot, op, dependency=take
                    ),
                ),
            )
        except DependencyRefused:
            d.sites.release_lease(lease)
            return self._defer(visibility, 1.0, "dependency_changed")
        except LimitReached as full:
            d.sites.release_lease(lease)
            if is_dependencys(gate, full):
                return self._held_by_dependency(op, site, self.gate.full(op, site, visibility, full, now))
            return self._principal_busy(site, visibility)
        except NotRunnable:
            return self._not_runnable(op.operation_id, lease, message, visibility)
        except Exception as exc:
            # A transient failure before any attempt was spent (throttling, a 5xx, a transaction conflict): give the
            # lease back and look again shortly, rather than hold both for two lease lengths.
            d.sites.release_lease(lease)
            obs.logger.warning("could not start the attempt", extra={"error": _describe(exc)})
            return self._defer(visibility, d.settings.backoff_base_s, "attempt_start_failed")

    def _lease_held(self, visibility: Visibility, expires_at: float, now: float) -> Result:
        wait = min(max(expires_at - now, 1.0), self.deps.settings.defer_max_s)
        return self._defer(visibility, wait, "lease_held")

    def _principal_busy(self, site: Site, visibility: Visibility) -> Result:
        """The principal already runs its share of this lane: give the environment to someone else."""
        d = self.deps
        obs.count(obs.Metric.PrincipalRunningCapDeferred)
        return self._defer(
            visibility,
            min(site.avg_operation_s or d.settings.defer_max_s, d.settings.defer_max_s),
            "principal_running_cap",
        )

    def _run(self, op: Operation, site: Site, lease: Lease, message: QueueMessage, visibility: Visibility) -> Result:
        d = self.deps
        handler = d.handlers.get(op.kind)
        ctx: HandlerContext | None = None
        driver: SiteDriver | None = None
        try:
            if handler is None:
                raise PermanentError(f"no handler for kind {op.kind.value}", code="unknown_kind")
            payload = load_input(op.kind, op_input(d.blobs, op))
            driver = driver_for(d.drivers, site)
            ctx = HandlerContext(
                site=site,
                operation=op,
                lease=lease,
                payload=payload,
                settings=d.settings,
                clock=d.clock,
                blobs=d.blobs,
                sites=d.sites,
                visibility=visibility,
                driver=driver,
                deadline=self.deadline,
            )
            ctx.checkpoints = lambda checkpoint, continues: d.operations.save_checkpoint(
                op.operation_id, ctx.lease.fence, checkpoint, d.clock.now(), continues
            )
            mutation = handler(ctx, payload)
            lease = ctx.lease
            now = d.clock.now()
            prepared = prepare_commit(op, site, lease, mutation, now, d.pace)
            d.commits.commit(prepared, now)
            d.outcomes.succeeded(now)  # a write of its own: in the commit, fleet-wide items would be contended
            self.gate.probes_succeeded(op, now)
            commit, publication = prepared.commit, prepared.publication
        except ContinueLater:
            # The step's checkpoint is recorded as a continuation: the lease stays ours until it lapses, and the
            # message is back at once for the next invocation, which continues this attempt (no attempt spent).
            visibility.change(0)
            obs.count(obs.Metric.OperationContinued)
            return Result(Outcome.CONTINUING, "continuing")
        except AlreadyCommitted:
            obs.count(obs.Metric.DuplicateCommitAvoided)
            earlier = d.commits.get(op.operation_id)
            if earlier is not None:
                self._send_pending_publication(earlier.site_id, earlier.version)
            return Result(Outcome.SUCCEEDED, "already_committed", commit=earlier)
        except (StaleFence, NotRunnable) as lost:
            current = d.operations.get(op.operation_id)
            if current is not None and current.cancel_requested and not current.status.terminal:
                return self._cancelled(current, lease, message)
            # Someone else holds the site now (our lease expired, or a duplicate delivery took it): our work is void.
            # Come back later; the next delivery sees the winner's outcome.
            obs.count(obs.Metric.LeaseLost)
            obs.logger.warning("lease lost before commit", extra={"reason": lost.code})
            return self._defer(visibility, d.settings.defer_max_s, f"lease_lost:{lost.code}")
        except PermanentError as exc:
            d.sites.release_lease(lease)
            error = ErrorInfo(type(exc).__name__, exc.code, str(exc), False)
            return self._dead(_as_checkpointed(op, ctx), lease.fence, error, message, exc, driver)
        except Exception as exc:
            op = _as_checkpointed(op, ctx)
            d.sites.release_lease(lease)
            code = getattr(exc, "code", None) or type(exc).__name__
            error = ErrorInfo(type(exc).__name__, str(code), _describe(exc), True)
            return self._retry(op, lease.fence, error, message, visibility, exc, driver)
        if publication is not None:
            # The outbox row was written with the commit; this send is the fast path (a lost one is re-sent by the
            # next delivery of this operation or by the reconciler).
            d.publication_queue.send(PublicationMessage(op.site_id, publication.revision_id, publication.seq))
        obs.count(obs.Metric.OperationSucceeded)
        took = d.clock.now() - (op.started_at or commit.committed_at)
        obs.seconds(obs.Metric.OperationDuration, took)
        obs.logger.info("committed", extra={"version": commit.version, "revision_id": commit.revision_id})
        return Result(Outcome.SUCCEEDED, "committed", commit=commit)

    def _send_pending_publication(self, site_id: str, version: int) -> None:
        """The publication of the commit at `version` sent again if it is still pending (a publication's sequence
        number is its commit's version)."""
        publication = self.deps.publications.get(site_id, version)
        if publication is not None and publication.status == PublicationStatus.PENDING:
            self.deps.publication_queue.send(PublicationMessage(site_id, publication.revision_id, version))

    def _newer_of_same_kind(self, op: Operation) -> Operation | None:
        for other in self.deps.operations.list(site_id=op.site_id, limit=SUPERSESSION_SCAN):
            if other.created_at <= op.created_at:
                break  # newest first: nothing newer left
            if other.kind == op.kind and other.status in {Status.ACCEPTED, Status.QUEUED, Status.RUNNING}:
                return other
        return None

    def _supersede(self, op: Operation, newer: Operation, message: QueueMessage) -> Result:
        try:
            self.deps.operations.end(
                op,
                Status.SUPERSEDED,
                self.deps.clock.now(),
                from_statuses=(Status.ACCEPTED, Status.QUEUED),
                reason=f"superseded by {newer.operation_id}",
                superseded_by=newer.operation_id,
            )
        except NotRunnable:
            return self._ack("supersede_race", message)
        obs.count(obs.Metric.OperationSuperseded)
        obs.logger.info("superseded", extra={"superseded_by": newer.operation_id})
        return Result(Outcome.ACKED, "superseded")

    def _cancelled(self, op: Operation, lease: Lease, message: QueueMessage) -> Result:
        """A cancel was recorded while the operation was running: it ends cancelled and commits nothing."""
        self.deps.sites.release_lease(lease)
        try:
            self.deps.operations.end(
                op,
                Status.CANCELLED,
                self.deps.clock.now(),
                from_statuses=(Status.RUNNING, Status.QUEUED, Status.ACCEPTED),
                reason=op.cancel_requested or "cancelled",
            )
        except NotRunnable:
            return self._ack("cancel_race", message)
        obs.count(obs.Metric.OperationCancelled)
        return Result(Outcome.ACKED, "cancelled")

    def _retry(
        self,
        op: Operation,
        fence: int,
        error: ErrorInfo,
        message: QueueMessage,
        visibility: Visibility,
        exc: BaseException,
        driver: SiteDriver | None = None,
    ) -> Result:
        d = self.deps
        if op.attempt >= op.attempt_budget:
            return self._dead(
                op,
                fence,
                ErrorInfo(
                    error.error_class,
                    error.code,
                    f"attempt budget {op.attempt_budget} spent; last error: {error.message}",
                    False,
                ),
                message,
                exc,
                driver,
            )
        count_towards_pause(d, op, error, driver, self.gate.probing)
        delay = full_jitter(op.attempt, d.settings.backoff_base_s, d.settings.backoff_cap_s, d.rng)
        if d.retry_budget.exhausted(d.clock.now()):
            # A retry storm: this retry waits longer than its backoff (uniformly spread over a further window).
            delay = max(delay, d.settings.retry_budget_defer_s * (1 + d.rng.random()))
            obs.count(obs.Metric.RetryBudgetExhausted)
        now = d.clock.now()
        try:
            d.operations.schedule_retry(op, fence, error, now + delay, now)
        except (StaleFence, NotRunnable):
            return self._defer(visibility, d.settings.defer_max_s, "retry_lost_race")
        visibility.change(delay)
        obs.count(obs.Metric.OperationRetried)
        obs.logger.warning("attempt failed, retrying", extra={"error": error.message, "delay_s": round(delay, 3)})
        return Result(Outcome.RETRYING, error.code, delay_s=delay)

    def _dead(
        self,
        op: Operation,
        fence: int | None,
        error: ErrorInfo,
        message: QueueMessage,
        exc: BaseException | None = None,
        driver: SiteDriver | None = None,
    ) -> Result:
        count_towards_pause(self.deps, op, error, driver, self.gate.probing)
        if not dead_letter(self.deps, op, fence, error, message, self.request_id, exc):
            return self._ack("dead_race_lost", message)
        self.deps.outcomes.dead(self.deps.clock.now())  # a statistic: lost with a crash here, and that is all
        return Result(Outcome.DEAD, error.code)

    def _not_runnable(self, operation_id: str, lease: Lease, message: QueueMessage, visibility: Visibility) -> Result:
        """start_attempt refused: terminal meanwhile, a concurrent delivery started a newer attempt, or the budget is
        spent (crash loop)."""
        d = self.deps
        op = d.operations.get(operation_id)
        d.sites.release_lease(lease)
        if op is None or op.status.terminal:
            return self._ack("terminal_meanwhile", message)
        if op.fence is not None and op.fence > lease.fence:
            return self._defer(visibility, d.settings.defer_max_s, "lease_lost:newer_attempt")
        if op.attempt < op.attempt_budget:
            return self._defer(visibility, 1.0, "attempt_race")
        error = ErrorInfo(
            "AttemptsExhausted",
            "attempts_exhausted",
            f"attempt budget {op.attempt_budget} spent without a commit (each attempt's process "
            "ended before it could record an outcome: a crash, a timeout or a kill)",
            False,
        )
        return self._dead(op, None, error, message)

    def _defer(self, visibility: Visibility, seconds: float, reason: str) -> Result:
        jittered = seconds * (0.8 + 0.4 * self.deps.rng.random())
        visibility.change(jittered)
        obs.count(obs.Metric.OperationDeferred)
        return Result(Outcome.DEFERRED, reason, delay_s=jittered)

    def _ack(self, reason: str, message: QueueMessage) -> Result:
        obs.count(obs.Metric.DuplicateAcknowledged)
        obs.logger.info("acknowledged without work", extra={"reason": reason, "operation_id": message.operation_id})
        return Result(Outcome.ACKED, reason)


def _as_checkpointed(op: Operation, ctx: HandlerContext | None) -> Operation:
    """The operation with the last checkpoint its attempt recorded (what its evidence names if it ends dead)."""
    if ctx is None or ctx.last_checkpoint is None:
        return op
    return replace(op, checkpoint=ctx.last_checkpoint)


def op_input(blobs: BlobStore, op: Operation) -> bytes:
    """The operation's input: kept in its row when small, else in S3 at its input key."""
    return op.inline_input.encode() if op.inline_input is not None else blobs.get(op.input_key)


def _shares_of(message: QueueMessage) -> list[str]:
    """The shards of the share the message's operation is in (a message that names no principal: none), read with
    the operation so that its end knows whether others wait."""
    if not (message.lane and message.principal):
        return []
    return share_group(message.lane, message.principal, message.tenant_key, SHARE_SHARDS, message.deps).shard_ids()


def _describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
