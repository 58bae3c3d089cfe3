"""The reconciler: repairs a schedule runs. Cron only coordinates (G8): it re-sends and re-points, it never does the
work itself, and everything it does is safe to do twice.

- `reconcile`: orphans (accepted, never sent; a batch's group still recorded unsent; or queued and untouched far
  past any deferral), stale leases (a running operation whose lease expired: that attempt failed, re-enqueue), lost
  fan-ins (publications whose plan or chunk messages were lost), live.json pointers behind the live pointer, and
  drifted admission counters.
- `wp-events`: one `wp_cron` operation per site with something due, per due minute (through the idempotency key).
- `queue-repair`: dead-letter depth and age, DLQ messages of operations no longer dead at that epoch removed.

Each sweep is bounded by a time budget and page limits, reports what it repaired (metrics and one log line), and
says when it stopped early (`truncated`), so the next run continues.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sitedispatch import observability as obs
from sitedispatch.domain.errors import Backpressure, NotRunnable, StaleFence
from sitedispatch.domain.model import (
    RUNNABLE,
    ErrorInfo,
    Kind,
    Lease,
    Operation,
    PublicationMessage,
    PublicationStatus,
    Site,
    Status,
    lane_for,
)
from sitedispatch.domain.ports import (
    BlobStore,
    Clock,
    DeadLetter,
    EventLog,
    EventQueue,
    OperationQueue,
    OperationStore,
    PublicationQueue,
    PublicationStore,
    SiteStore,
    WebhookQueue,
    WebhookStore,
)
from sitedispatch.domain.settings import Settings
from sitedispatch.domain.webhooks import WebhookMessage
from sitedispatch.flow.admission import message_for, recount, waiting_shares
from sitedispatch.flow.counters import is_flow_counter
from sitedispatch.flow.shares import refill, share_named
from sitedispatch.publication.live import live_key, write_live_document

if TYPE_CHECKING:
    from sitedispatch.operations.submission import Submitter

RECOUNT_LIMIT = 100_000
RELEASE_LIMIT = 100  # operations one sweep releases per share (a share holds 2 x its running cap)
STALE_LEASE_ERROR = "lease_expired"


@dataclass(frozen=True)
class ReconcilerPolicy:
    orphan_grace_s: float = 30.0  # accepted this long without a send: the submitter died
    queued_orphan_s: float = 3600.0  # queued and untouched this long (far past any deferral or backoff): re-send
    lease_grace_s: float = 5.0  # a lease expired this long ago, its operation still running: the attempt died
    publication_stall_s: float = 300.0  # a publication pending or planned this long: re-send its missing steps
    live_repair_window_s: float = 3600.0  # live.json is checked for sites promoted within this window
    counter_quiet_s: float = 120.0  # a counter is repaired only after this long without a change
    time_budget_s: float = 45.0  # of the function's 60 s timeout


@dataclass
class Sweep:
    schedule: str
    repaired: dict[str, int] = field(default_factory=dict)
    truncated: bool = False
    failed: list[str] = field(default_factory=list)  # the steps that raised (each logged and counted)


@dataclass
class ReconcilerDeps:
    settings: Settings
    operations: OperationStore
    sites: SiteStore
    publications: PublicationStore
    queue: OperationQueue
    publication_queue: PublicationQueue
    blobs: BlobStore
    clock: Clock
    submit_wp_cron: Callable[[Site, int], str]  # (site, due minute) -> "submitted" | "exists" | "refused"
    events: EventLog
    event_queue: EventQueue
    webhooks: WebhookStore
    webhook_queue: WebhookQueue


class Reconciler:
    def __init__(self, deps: ReconcilerDeps, policy: ReconcilerPolicy = ReconcilerPolicy()) -> None:
        self.deps = deps
        self.policy = policy
        self._deadline = 0.0

    def schedules(self) -> dict[str, Callable[[], Sweep]]:
        """Schedule name -> sweep. An unknown name is logged and skipped by the caller."""
        return {"reconcile": self.reconcile, "wp-events": self.wp_events, "queue-repair": self.queue_repair}

    def run(self, schedule: str) -> Sweep | None:
        sweep = self.schedules().get(schedule)
        if sweep is None:
            obs.logger.warning("unknown schedule skipped", extra={"schedule": schedule})
            return None
        self._deadline = self.deps.clock.now() + self.policy.time_budget_s
        result = sweep()
        for name, value in result.repaired.items():
            obs.count(_metric(name), value)
        obs.logger.info(
            f"{schedule} sweep",
            extra={"repaired": result.repaired, "truncated": result.truncated, "failed": result.failed},
        )
        return result

    def _step(self, sweep: Sweep, name: str, repair: Callable[[], int]) -> None:
        """Run one repair of a sweep. Its failure (a denied call, a throttle, a bug) is logged with its cause,
        counted (ReconcileStepFailed, alarmed) and named in the sweep, and the steps after it still run: one
        repair that cannot run must not stop the others, every minute."""
        try:
            sweep.repaired[name] = repair()
        except Exception as exc:  # not hidden: logged with its traceback, counted, alarmed, returned
            sweep.failed.append(name)
            obs.logger.exception(
                "reconcile step failed", extra={"step": name, "error": f"{type(exc).__name__}: {exc}"[:500]}
            )
            obs.count(obs.Metric.ReconcileStepFailed)

    def _out_of_time(self, sweep: Sweep) -> bool:
        if self._deadline and self.deps.clock.now() >= self._deadline:
            sweep.truncated = True
        return sweep.truncated

    # -- reconcile -----------------------------------------------------------------------------------------------

    def reconcile(self) -> Sweep:
        """Each step reads what may need repair, never every site: operations by status (what is in flight), the
        by-open publications, the by-live sites and the by-held counters. A quiet fleet costs a few empty queries,
        whatever its size."""
        sweep = Sweep("reconcile")
        # What is in flight, read once (one query per status) for the orphans, the stale leases and the recount;
        # if that read fails, the steps that need it are failed with it and the others run.
        flight: dict[Status, list[Operation]] = {}

        def read_flight() -> int:
            flight.update(
                {status: self.deps.operations.list(status=status, limit=RECOUNT_LIMIT) for status in RUNNABLE}
            )
            return sum(len(ops) for ops in flight.values())

        def outstanding() -> list[Operation]:
            return [op for ops in flight.values() for op in ops]

        self._step(sweep, "in_flight_read", read_flight)
        read = not sweep.failed
        steps: list[tuple[str, bool, Callable[[], int]]] = [
            ("orphans_resent", True, lambda: self.resend_orphans(sweep, flight)),
            ("unsent_groups_sent", False, lambda: self.send_unsent_groups(sweep)),
            ("waiting_released", True, lambda: self.release_waiting(sweep, flight[Status.ACCEPTED])),
            ("stale_leases_recovered", True, lambda: self.recover_stale_leases(sweep, flight[Status.RUNNING])),
            ("publications_resumed", False, lambda: self.resume_publications(sweep)),
            ("live_pointers_repaired", False, lambda: self.repair_live_pointers(sweep)),
            ("events_resent", False, lambda: self.resend_events(sweep)),
            ("webhooks_woken", False, lambda: self.wake_webhooks(sweep)),
            ("counters_repaired", True, lambda: 0 if self._out_of_time(sweep) else self.repair_counters(outstanding())),
        ]
        for name, needs_flight, repair in steps:
            if needs_flight and not read:
                sweep.failed.append(name)
                continue
            self._step(sweep, name, repair)
        sweep.repaired.pop("in_flight_read", None)
        return sweep

    def resend_events(self, sweep: Sweep) -> int:
        """Events written with their transition, not yet delivered a grace after: the process that committed died
        before its send (or the events worker is behind: a second message is deduplicated, or delivered harmlessly)."""
        d = self.deps
        resent = 0
        for message in d.events.undelivered(before=d.clock.now() - self.policy.orphan_grace_s):
            if self._out_of_time(sweep):
                break
            d.event_queue.send(message)
            resent += 1
        return resent

    def wake_webhooks(self, sweep: Sweep) -> int:
        """Endpoints whose wake was lost: an attempt due a grace ago, or a redelivery asked for (a sparse index, as
        the undelivered events: a quiet fleet reads nothing). A wake of an endpoint that is busy waits behind it in
        its group and finds nothing to do. A wake lost after events took their places is sent again by the events
        worker when the batch comes back."""
        d, now = self.deps, self.deps.clock.now()
        woken = 0
        for endpoint in d.webhooks.due(before=now - self.policy.orphan_grace_s):
            if self._out_of_time(sweep):
                break
            d.webhook_queue.send(WebhookMessage(endpoint.principal, endpoint.endpoint_id, f"sweep:{now:.0f}"))
            woken += 1
        return woken

    def resend_orphans(self, sweep: Sweep, flight: dict[Status, list[Operation]]) -> int:
        """Re-sending is always safe: the worker skips what is done, and dedup ids follow the epoch."""
        d, now = self.deps, self.deps.clock.now()
        resent = 0
        for op in flight[Status.ACCEPTED]:
            if self._out_of_time(sweep):
                break
            if op.created_at <= now - self.policy.orphan_grace_s and self._resend_accepted(op):
                resent += 1
        paused: dict[str, bool] = {}  # read per site, only for candidates (a paused site's messages wait on purpose)
        for op in flight[Status.QUEUED]:
            if self._out_of_time(sweep):
                break
            untouched_since = max(op.updated_at, op.not_before or 0.0)
            if untouched_since > now - self.policy.queued_orphan_s:
                continue
            if op.site_id not in paused:
                site = d.sites.get(op.site_id)
                paused[op.site_id] = site is not None and site.paused
            if not paused[op.site_id]:
                self._send(op)
                resent += 1
        return resent

    def send_unsent_groups(self, sweep: Sweep) -> int:
        """A batch writes its groups' rows `queued` with a record of each group, deleted once their messages are
        sent: a record older than the orphan grace is a batch that died before that. Its operations that never
        started are sent (again, perhaps: safe), then the record goes."""
        d = self.deps
        done = 0
        for group in d.operations.unsent(created_before=d.clock.now() - self.policy.orphan_grace_s):
            if self._out_of_time(sweep):
                break
            for operation_id in group.operation_ids:
                op = d.operations.get(operation_id)
                if op is not None and op.status == Status.QUEUED and op.attempt == 0 and not op.waiting_for:
                    self._send(op)
            d.operations.sent([group.group_id])
            done += 1
        return done

    def _resend_accepted(self, op: Operation) -> bool:
        """Send an operation accepted and never sent. One waiting for its principal's share is not sent on purpose
        (release_waiting); the index may still show a row sent meanwhile (eventually consistent), so the row itself,
        read consistently, decides."""
        if op.waiting_for:
            return False
        current = self.deps.operations.get(op.operation_id)
        if current is None or current.status != Status.ACCEPTED or current.waiting_for:
            return False
        self._send(current)
        self.deps.operations.mark_queued(op.operation_id, self.deps.clock.now())
        return True

    def release_waiting(self, sweep: Sweep, accepted: list[Operation]) -> int:
        """Operations wait for their fairness key's share until a finish releases them; a finish whose read came
        before the first of them began waiting releases none, and its place stays empty. Here every share something
        waits for is filled up to its room (its shards read once; a query and a transaction per shard with room)."""
        released = 0
        for group in sorted({share for share, _ in waiting_shares(accepted)}):
            if self._out_of_time(sweep):
                break
            share = share_named(self.deps.settings, group)
            released += refill(self.deps.operations, self.deps.queue, self.deps.clock, share, RELEASE_LIMIT)
        return released

    def recover_stale_leases(self, sweep: Sweep, running: list[Operation]) -> int:
        """A running operation whose lease expired (no heartbeat) or passed to another operation: that attempt is
        over. It is failed and queued again; the attempt's process, if it ever wakes, cannot commit (its fence)."""
        d, now = self.deps, self.deps.clock.now()
        recovered = 0
        for op in running:
            if self._out_of_time(sweep):
                break
            site = d.sites.get(op.site_id)
            holds = (
                site is not None
                and site.lease_owner == op.operation_id
                and site.fence == op.fence
                and (site.lease_expires_at or 0.0) > now - self.policy.lease_grace_s
            )
            if holds or op.fence is None:
                continue
            error = ErrorInfo(
                "LeaseExpired",
                STALE_LEASE_ERROR,
                f"attempt {op.attempt} stopped renewing its lease (fence {op.fence}): its process "
                "died or stalled; the reconciler failed the attempt and queued the operation again",
                True,
            )
            try:
                d.operations.schedule_retry(op, op.fence, error, now, now)
            except (StaleFence, NotRunnable):
                continue  # it moved on meanwhile (committed, retried, or another attempt started)
            d.sites.release_lease(Lease(op.site_id, op.operation_id, op.fence, now))
            # A fresh dedup id: the original message may have been sent minutes ago (SQS would drop a same-id send
            # within five minutes). If the original still exists the worker sees two deliveries; that is harmless.
            self._send(op, f"{op.dedup_id}-f{op.fence}")
            recovered += 1
            obs.logger.warning(
                "stale lease recovered",
                extra={"operation_id": op.operation_id, "site_id": op.site_id, "fence": op.fence},
            )
        return recovered

    def resume_publications(self, sweep: Sweep) -> int:
        """Lost fan-ins: a publication that stalled (its plan or some chunk messages lost, or its finisher died
        after the last chunk) gets its missing steps sent again. Steps are idempotent; one that a newer
        publication overtook finishes as superseded, which takes it out of the by-open index."""
        d, now = self.deps, self.deps.clock.now()
        resumed = 0
        for publication in d.publications.open_before(now - self.policy.publication_stall_s):
            if self._out_of_time(sweep):
                break
            if publication.status not in {PublicationStatus.PENDING, PublicationStatus.PLANNED}:
                continue  # finished a moment ago (the index lags the table)
            site_id = publication.site_id
            steps = (
                [PublicationMessage(site_id, publication.revision_id, publication.seq)]
                if publication.total_chunks is None
                else [
                    PublicationMessage(site_id, publication.revision_id, publication.seq, chunk)
                    for chunk in range(publication.total_chunks)
                    if chunk not in publication.done_chunks
                ]
                or [PublicationMessage(site_id, publication.revision_id, publication.seq, publication.total_chunks - 1)]
            )  # all done, never finished
            for step in steps:
                d.publication_queue.send(step)
            resumed += 1
        return resumed

    def repair_live_pointers(self, sweep: Sweep) -> int:
        """live.json is written after the promotion; a publisher that died in between left it behind. Only the
        sites promoted within the window are looked at (the by-live index)."""
        d, now = self.deps, self.deps.clock.now()
        repaired = 0
        for site in d.sites.promoted_since(now - self.policy.live_repair_window_s):
            if self._out_of_time(sweep):
                break
            if site.live_revision is None:
                continue
            current = d.blobs.read_versioned(live_key(site.site_id))
            if current is not None and json.loads(current[0]).get("seq", 0) >= site.live_seq:
                continue
            if write_live_document(d.blobs, site):
                repaired += 1
        return repaired

    def repair_counters(self, outstanding: list[Operation] | None = None) -> int:
        """Counters are exact by construction (moved in the transactions that move operations); this recount is the
        tool for drift from a bug or a hand edit. A counter is set to the recount only if it has been quiet for
        `counter_quiet_s` and still holds what was read, so a recount racing live traffic changes nothing. The recount
        reads the by-status index (eventually consistent): it relies on the index lagging the table by less than
        `counter_quiet_s`, which DynamoDB's sub-second propagation meets with a wide margin. `outstanding`: the
        operations in flight as the sweep read them at its start (else read here); anything the sweep itself moved
        since is recent, so the quiet condition refuses to overwrite it.

        The statuses are read one query after another, so an operation that moves between two of them meanwhile is
        read twice, or not at all (read `queued` while it runs, `running` once it is back in the queue): a long
        operation's counters stay quiet while it moves. Each operation counts once (its latest row), and a counter
        the recount would change is changed only if a second read of the statuses, in the other order, agrees."""
        d = self.deps
        started = d.clock.now()
        quiet_since = started - self.policy.counter_quiet_s
        # Only counters moved since a recount last found them at zero and quiet can have drifted (by-held); those
        # found so again leave the index, so a quiet fleet's recount reads nothing.
        observed = {k: r.value for k, r in d.operations.held_counters().items() if is_flow_counter(k)}
        if outstanding is None:
            outstanding = self._outstanding(RUNNABLE)
        expected = recount(latest_rows(outstanding))
        missing = [k for k in expected.keys() - observed.keys()]  # a counter that lost its increments
        observed.update({k: d.operations.counter(k) for k in missing})
        drifted = {k for k in observed.keys() | expected.keys() if observed.get(k, 0) != expected.get(k, 0)}
        if drifted:  # rare: read again, in the other order, what may have moved between the first reads
            expected = recount(latest_rows([*outstanding, *self._outstanding(tuple(reversed(RUNNABLE)))]))
        repaired = 0
        for counter in sorted(observed.keys() | expected.keys()):
            have, want = observed.get(counter, 0), expected.get(counter, 0)
            if have == want == 0:
                d.operations.forget_counter(counter, quiet_since)
            elif (
                have != want
                and counter in drifted
                and d.operations.repair_counter(counter, have, want, quiet_since, d.clock.now())
            ):
                obs.logger.warning("counter repaired", extra={"counter": counter, "was": have, "now": want})
                repaired += 1
        return repaired

    def _outstanding(self, statuses: Sequence[Status]) -> list[Operation]:
        return [op for status in statuses for op in self.deps.operations.list(status=status, limit=RECOUNT_LIMIT)]

    # -- wp-events -----------------------------------------------------------------------------------------------

    def wp_events(self) -> Sweep:
        """One `wp_cron` per site with something due, per due minute: the idempotency key is (site, minute), so a
        second run in the same minute submits nothing new, and a queued older one is superseded by the newer."""
        sweep = Sweep("wp-events")
        d, now = self.deps, self.deps.clock.now()
        minute = int(now // 60)
        outcomes = {"submitted": 0, "exists": 0, "refused": 0}
        for site in d.sites.due(now):
            if self._out_of_time(sweep):
                break
            if not site.paused:
                outcomes[self.deps.submit_wp_cron(site, minute)] += 1
        sweep.repaired.update({f"wp_cron_{outcome}": n for outcome, n in outcomes.items()})
        return sweep

    # -- queue-repair --------------------------------------------------------------------------------------------

    def queue_repair(self) -> Sweep:
        """Dead-letter depth and age per lane; messages whose operation is no longer dead at that epoch (redriven,
        replayed, or ended otherwise) removed."""
        sweep = Sweep("queue-repair")
        d, now = self.deps, self.deps.clock.now()
        stale_removed = 0
        for lane in sorted({lane_for(kind) for kind in Kind}):
            if self._out_of_time(sweep):
                break

            def stale(letter: DeadLetter) -> bool:
                op = d.operations.get(letter.attributes.get("operation_id", ""))
                return op is None or op.status != Status.DEAD or str(op.epoch) != letter.attributes.get("epoch")

            removed, kept = d.queue.sweep_dead_letters(lane, stale)
            stale_removed += len(removed)
            oldest = min((letter.sent_at for letter in kept if letter.sent_at), default=None)
            obs.count(f"DeadLetterDepth{lane.capitalize()}", len(kept))
            obs.seconds(f"DeadLetterOldestAge{lane.capitalize()}", now - oldest if oldest else 0.0)
            sweep.repaired[f"dlq_depth_{lane}"] = len(kept)
        sweep.repaired["dlq_stale_removed"] = stale_removed
        waiting = [
            op
            for status in (Status.ACCEPTED, Status.QUEUED)
            for op in d.operations.list(status=status, limit=RECOUNT_LIMIT)
        ]
        for lane in sorted({lane_for(kind) for kind in Kind}):
            ages = [now - (op.queued_at or op.created_at) for op in waiting if lane_for(op.kind) == lane]
            obs.seconds(f"OldestQueuedAge{lane.capitalize()}", max(ages, default=0.0))
        return sweep

    def _send(self, op: Operation, dedup_id: str | None = None) -> None:
        self.deps.queue.send(message_for(op), dedup_id or op.dedup_id, lane_for(op.kind))


def latest_rows(operations: Iterable[Operation]) -> list[Operation]:
    """Each operation once: its row as last updated (reads of two statuses may both hold it)."""
    latest: dict[str, Operation] = {}
    for op in operations:
        seen = latest.get(op.operation_id)
        if seen is None or op.updated_at >= seen.updated_at:  # the same instant: the later read
            latest[op.operation_id] = op
    return list(latest.values())


def _metric(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def wp_cron_submitter(submitter: Submitter) -> Callable[[Site, int], str]:
    """The wp-events sweep's submit: as the site's owner, keyed by (site, due minute)."""

    def submit(site: Site, minute: int) -> str:
        try:
            result = submitter.submit(
                kind=Kind.WP_CRON.value,
                site_id=site.site_id,
                principal=site.principal,
                params={"due_minute": minute},
                idempotency_key=f"wp-events:{minute}",
            )
        except Backpressure:
            return "refused"  # the site's queue is full: the next minute tries again
        return "submitted" if result.created else "exists"

    return submit
