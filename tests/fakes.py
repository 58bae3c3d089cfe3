"""In-memory fakes of the core's ports, with the same conditional semantics as the DynamoDB/S3/SQS adapters.

`tests/integration/test_store_contract.py` runs one contract suite against these fakes and against DynamoDB on moto,
so a fake cannot quietly drift from the real store.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any, TypeVar

from sitedispatch.domain.dependencies import (
    BREAKER,
    BreakerState,
    Dependency,
    DependencyReading,
    DependencyRefused,
    DependencyTake,
    KeyRates,
    Rate,
    RateTake,
)
from sitedispatch.domain.errors import (
    AlreadyCommitted,
    AlreadyExists,
    Conflict,
    InvalidInput,
    LabelMoved,
    LeaseHeld,
    LimitReached,
    NotFound,
    NotRunnable,
    ShareMoved,
    SiteRegistered,
    StaleFence,
    UnclaimedSite,
)
from sitedispatch.domain.events import (
    AUTOMATIC,
    Event,
    EventMessage,
    FeedEntry,
    StoredEvent,
    dependency_changed,
    operation_ended,
    site_paused,
)
from sitedispatch.domain.model import (
    MAX_FAILURE_CHARS,
    RUNNABLE,
    AuditEntry,
    Commit,
    ErrorInfo,
    HeldDelivery,
    Kind,
    Lease,
    Operation,
    Publication,
    PublicationMessage,
    PublicationStatus,
    QueueMessage,
    Quota,
    Site,
    SiteConnection,
    Status,
)
from sitedispatch.domain.paging import Page, decode_cursor, encode_cursor, take
from sitedispatch.domain.ports import (
    RELEASE_LOOKAHEAD,
    AuditLog,
    BlobStore,
    Clock,
    CommitStore,
    CounterReading,
    DeadLetter,
    Delivery,
    DependencyStore,
    EventBus,
    EventLog,
    EventQueue,
    Move,
    OperationQueue,
    OperationStore,
    Placement,
    PreparedCommit,
    PublicationQueue,
    PublicationStore,
    QuotaStore,
    SiteOwner,
    SiteStore,
    Slot,
    StoredObject,
    UnsentGroup,
    Visibility,
    WebhookQueue,
    WebhookSecrets,
    WebhookSender,
    WebhookStore,
    checked_registration,
    foreign_site,
)
from sitedispatch.domain.webhooks import (
    ROTATION_OVERLAP_S,
    Attempt,
    AttemptResult,
    Endpoint,
    WebhookDelivery,
    WebhookMessage,
    new_secret,
    signing_secrets,
)
from sitedispatch.flow.admission import held_by
from sitedispatch.flow.counters import quota_key, site_counter
from sitedispatch.flow.dependencies import HELD_KEPT, failures_key, key_rates_key, rate_key, running_shards
from sitedispatch.flow.minute_counts import Bucket, MinuteBuckets, expires_at

T = TypeVar("T")


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start
        self.lock = threading.Lock()

    def now(self) -> float:
        with self.lock:
            return self.t

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds


@dataclass
class MemoryDb:
    """The three tables; one lock stands in for DynamoDB's item-level and transactional atomicity."""

    operations: dict[str, Operation] = field(default_factory=dict)
    sites: dict[str, Site] = field(default_factory=dict)
    held_deliveries: dict[str, dict[str, HeldDelivery]] = field(default_factory=dict)  # a paused site's, to wake
    commits: dict[str, Commit] = field(default_factory=dict)
    publications: dict[tuple[str, int], Publication] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    counters_changed_at: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, Bucket] = field(default_factory=dict)  # per-minute counts (flow/minute_counts.py)
    counter_expiry: dict[str, float] = field(default_factory=dict)  # the TTL of per-minute counts

    counter_maximum: dict[str, int] = field(default_factory=dict)  # operators' quotas kept on their counters
    counter_owner: dict[str, str] = field(default_factory=dict)  # a site's owner, kept on its admission counter
    counter_label: dict[str, str] = field(default_factory=dict)  # the dependency set a site's work waits by, likewise
    held: set[str] = field(default_factory=set)  # counters moved up since a recount found them zero and quiet
    waiting: dict[str, int] = field(default_factory=dict)  # share counter -> operations waiting for it
    unsent: dict[str, UnsentGroup] = field(default_factory=dict)  # batch groups not yet known sent
    events: dict[str, StoredEvent] = field(default_factory=dict)  # every event its transition wrote
    undelivered: set[str] = field(default_factory=set)  # events not yet on the bus
    feed: dict[str, list[FeedEntry]] = field(default_factory=dict)  # principal -> its feed, in place order
    announced: list[EventMessage] = field(default_factory=list)  # the events queue's messages, in send order
    endpoints: dict[str, Endpoint] = field(default_factory=dict)  # webhook endpoints by id
    webhook_deliveries: dict[tuple[str, int], WebhookDelivery] = field(default_factory=dict)
    dependencies: dict[str, Dependency] = field(default_factory=dict)  # an operator's settings, the breaker's state
    dependency_index: set[str] = field(default_factory=set)  # every id a site named or an operator set
    dependency_flags: dict[str, tuple[bool, str | None]] = field(default_factory=dict)  # shard -> (blocked, probe)
    dependency_tats: dict[str, float] = field(default_factory=dict)  # rate bucket -> theoretical arrival time
    # (dependency, lane) -> operation id -> (held at, receipt): the deliveries a dependency's end or resume wakes
    dependency_held: dict[tuple[str, str], dict[str, tuple[float, str]]] = field(default_factory=dict)
    dependency_failures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # window -> its failures
    key_rates: dict[str, KeyRates] = field(default_factory=dict)  # keyrates#P[#T] -> an operator's key rates

    def dependency_open_for(self, shard: str, operation_id: str) -> bool:
        """The breaker's flag on a running shard lets this operation start (closed, or it is the probe)."""
        blocked, probe = self.dependency_flags.get(shard, (False, None))
        return not blocked or probe == operation_id

    def take_dependencies(self, take: DependencyTake, operation_id: str, now: float) -> None:
        """The claim's conditions on the dependencies' items, all checked before any is written (as one
        transaction): LimitReached naming a full capped shard, DependencyRefused for a flag or a bucket."""
        for slot in take.slots:
            if not self.dependency_open_for(slot.counter, operation_id):
                raise DependencyRefused(slot.counter)
            self.check_room(slot.counter, slot.maximum)
        for gate in take.gates:
            if not self.dependency_open_for(gate, operation_id):
                raise DependencyRefused(gate)
        for rate in take.rates:
            if self.dependency_tats.get(rate.counter) != rate.read:
                raise DependencyRefused(rate.counter)
        for slot in take.slots:
            self.bump(slot.counter, 1, now)
        for rate in take.rates:
            self.dependency_tats[rate.counter] = rate.after

    def write_event(self, event: Event) -> None:
        """An event written with its transition (the caller holds the lock and writes the transition), then sent."""
        if event.event_id in self.events:
            raise AssertionError(f"event {event.event_id} written twice")
        self.events[event.event_id] = StoredEvent(event)
        self.undelivered.add(event.event_id)
        self.announced.append(EventMessage.of(event))

    def total(self, group: str) -> int:
        """A counter group's sum: the counter itself, or its shards (`group#k`)."""
        shard = re.compile(re.escape(group) + r"#\d+$")
        return sum(v for k, v in self.counters.items() if k == group or shard.match(k))

    def waiting_total(self, group: str) -> int:
        shard = re.compile(re.escape(group) + r"#\d+$")
        return sum(v for k, v in self.waiting.items() if k == group or shard.match(k))

    def room(self, slot: Slot) -> bool:
        return self.counters.get(slot.counter, 0) < self.counter_maximum.get(slot.counter, slot.maximum)

    def place(self, share: Placement | None, now: float) -> dict[str, Any]:
        """Take a place of the share's shard, or wait counted on it (as the stores' create does), or ShareMoved:
        what the row records."""
        if share is None:
            return {"share": None, "waiting_for": None, "waiting_at": None}
        counter = share.slot.counter
        open_now = self.room(share.slot) and not self.waiting.get(counter, 0)
        if share.waits:
            if open_now:
                raise ShareMoved(counter)
            self.waiting[counter] = self.waiting.get(counter, 0) + 1
            self.counters_changed_at[counter] = now
            self.held.add(counter)
            return {"share": None, "waiting_for": share.group, "waiting_at": counter}
        if not open_now or (share.guard is not None and self.waiting.get(share.guard, 0)):
            raise ShareMoved(counter)
        self.bump(counter, 1, now)
        return {"share": counter, "waiting_for": None, "waiting_at": None}

    def check_room(self, counter: str, default: int) -> None:
        """The stores' admission condition: below the counter's own maximum, else the deployment's."""
        maximum = self.counter_maximum.get(counter, default)
        if self.counters.get(counter, 0) >= maximum:
            raise LimitReached(counter, self.counters.get(counter, 0), maximum)

    def bump(self, counter: str, delta: int, now: float) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + delta
        self.counters_changed_at[counter] = now
        if delta > 0:
            self.held.add(counter)

    def release(self, counters: Sequence[str], now: float, waiting_at: str | None = None) -> None:
        for counter in counters:
            self.bump(counter, -1, now)
        if waiting_at is not None:
            self.waiting[waiting_at] -= 1
            self.counters_changed_at[waiting_at] = now

    lock: threading.RLock = field(default_factory=threading.RLock)
    # DynamoDB's global secondary indexes are eventually consistent: a write shows in an index read a moment later.
    # With `lagging_indexes`, the operations' index reads see the rows as they were at the last `propagate()`, so a
    # test can hold the core to what it relies on (every action taken on an index read is re-checked by a
    # conditional write on the row; the counter recount waits for quiet longer than any lag).
    lagging_indexes: bool = False
    _index_view: dict[str, Operation] = field(default_factory=dict)

    def indexed(self) -> dict[str, Operation]:
        return self._index_view if self.lagging_indexes else self.operations

    def propagate(self) -> None:
        """The indexes catch up with the table."""
        with self.lock:
            self._index_view = dict(self.operations)


def _continuable(op: Operation | None, recorded_fence: int) -> bool:
    """A continuation recorded under `recorded_fence` may be taken (once)."""
    return op is not None and op.status == Status.RUNNING and op.continuing and op.fence == recorded_fence


class MemoryOperationStore:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def create(
        self,
        op: Operation,
        limits: Sequence[Slot] = (),
        owner: SiteOwner | None = None,
        share: Placement | None = None,
    ) -> Operation:
        with self.db.lock:
            if op.operation_id in self.db.operations:
                raise AlreadyExists(op.operation_id)
            self._admit(op.principal, op.site_id, limits, owner)
            registers = owner is not None and owner.register
            if registers and op.site_id in self.db.sites:
                raise SiteRegistered(op.site_id)
            placed = self._place_atomically(limits, share, op.created_at)
            if owner is not None:
                self.db.counter_owner.setdefault(owner.counter, op.principal)
            if registers:
                self.db.sites[op.site_id] = Site(op.site_id, op.principal, op.created_at)
            op = replace(op, holds=tuple(slot.counter for slot in limits), **placed)
            self.db.operations[op.operation_id] = op
            return op

    def _admit(self, principal: str, site_id: str, limits: Sequence[Slot], owner: SiteOwner | None) -> None:
        for slot in limits:
            if owner is not None and slot.counter == owner.counter:
                named = self.db.counter_owner.get(slot.counter)
                if named is None and not owner.claim:
                    raise UnclaimedSite(slot.counter)
                if named is not None and named != principal:
                    raise foreign_site(site_id)
                if self.db.counter_label.get(slot.counter, "") != owner.label:
                    raise LabelMoved(site_id, self.db.counter_label.get(slot.counter, ""))
            self.db.check_room(slot.counter, slot.maximum)

    def _place_atomically(self, limits: Sequence[Slot], share: Placement | None, now: float) -> dict[str, Any]:
        """The share's placement, then the limits' places (only once the placement stands: all or nothing)."""
        placed = self.db.place(share, now)
        for slot in limits:
            self.db.bump(slot.counter, 1, now)
        return placed

    def _movable(self, move: Move, principal: str) -> bool:
        """A group's move's condition (Move), as DynamoDB evaluates it."""
        fits = self.db.counters.get(move.counter, 0) + move.count <= move.maximum
        if not fits or move.counter in self.db.counter_maximum:
            return False
        if (move.owner or move.register) and self.db.counter_label.get(move.counter, "") != move.label:
            return False
        if move.register:
            return move.counter not in self.db.counter_owner and move.register not in self.db.sites
        if move.owner and self.db.counter_owner.get(move.counter) != principal:
            return False
        return not (move.share and self.db.waiting.get(move.counter, 0))

    def create_group(self, ops: Sequence[Operation], moves: Sequence[Move]) -> bool:
        items = len(ops) + len(moves) + sum(1 for move in moves if move.register) + 1  # and the unsent record
        if items > 100:  # DynamoDB refuses such a transaction outright (ValidationException)
            raise ValueError(f"a transaction of {items} items: DynamoDB takes at most 100")
        with self.db.lock:
            if not ops:
                return False
            principal = ops[0].principal
            if not all(self._movable(move, principal) for move in moves):
                return False
            if any(op.operation_id in self.db.operations for op in ops):
                return False
            for move in moves:
                self.db.bump(move.counter, move.count, ops[0].created_at)
                if move.register:
                    self.db.counter_owner[move.counter] = principal
                    self.db.sites[move.register] = Site(move.register, principal, ops[0].created_at)
            for op in ops:
                self.db.operations[op.operation_id] = op
            group = ops[0].operation_id
            self.db.unsent[group] = UnsentGroup(group, tuple(op.operation_id for op in ops), ops[0].created_at)
            return True

    def sent(self, groups: Sequence[str]) -> None:
        with self.db.lock:
            for group in groups:
                self.db.unsent.pop(group, None)

    def unsent(self, created_before: float) -> list[UnsentGroup]:
        with self.db.lock:
            found = [group for group in self.db.unsent.values() if group.created_at < created_before]
        return sorted(found, key=lambda group: group.created_at)

    def release_waiting(self, group: str, into: Slot, now: float, limit: int = 1) -> list[Operation]:
        with self.db.lock:
            waiting = self._waiting(group)
            released: list[Operation] = []
            for seen in waiting[: limit + 2]:
                op = self.db.operations[seen.operation_id]
                if len(released) >= limit:
                    break
                if op.waiting_for != group or op.waiting_at != seen.waiting_at or op.status not in RUNNABLE:
                    continue
                if not self.db.room(into):
                    break
                self.db.bump(into.counter, 1, now)
                if op.waiting_at is not None:
                    self.db.waiting[op.waiting_at] -= 1
                op = replace(op, waiting_for=None, waiting_at=None, share=into.counter, updated_at=now)
                self.db.operations[op.operation_id] = op
                released.append(op)
            return released

    def _waiting(self, group: str) -> list[Operation]:
        """The share's waiting operations, as its (lagging) index shows them, oldest first."""
        return sorted((op for op in self.db.indexed().values() if op.waiting_for == group), key=lambda o: o.created_at)

    def hand_over(self, op: Operation, group: str, now: float, passing: Kind) -> Operation | None:
        with self.db.lock:
            passed: set[str] = set()
            for seen in self._waiting(group)[:RELEASE_LOOKAHEAD]:
                if seen.kind == passing or seen.site_id in passed:
                    passed.add(seen.site_id)
                    continue
                row, other = self.db.operations.get(op.operation_id), self.db.operations[seen.operation_id]
                if (
                    op.share is None
                    or row is None
                    or (row.share, row.epoch) != (op.share, op.epoch)
                    or row.status not in RUNNABLE
                ):
                    return None
                if other.waiting_for != group or other.waiting_at != seen.waiting_at or other.status not in RUNNABLE:
                    continue
                if other.waiting_at is not None:
                    self.db.waiting[other.waiting_at] -= 1
                self.db.operations[op.operation_id] = replace(row, share=None, updated_at=now)
                other = replace(other, waiting_for=None, waiting_at=None, share=op.share, updated_at=now)
                self.db.operations[other.operation_id] = other
                return other
            return None

    def relabel_site(self, site_id: str, label: str) -> bool:
        with self.db.lock:
            counter = site_counter(site_id)
            if self.db.counters.get(counter, 0) and self.db.counter_label.get(counter, "") != label:
                return False
            if label:
                self.db.counter_label[counter] = label
            else:
                self.db.counter_label.pop(counter, None)
            return True

    def read_counters(self, counter_ids: Sequence[str]) -> dict[str, CounterReading]:
        with self.db.lock:
            return {
                c: CounterReading(
                    self.db.counters.get(c, 0),
                    self.db.counter_maximum.get(c),
                    self.db.waiting.get(c, 0),
                    self.db.counter_owner.get(c),
                )
                for c in counter_ids
                if c in self.db.counters or c in self.db.counter_maximum or c in self.db.waiting
            }

    def counter(self, counter_id: str) -> int:
        return self.db.counters.get(counter_id, 0)

    def counters(self, prefix: str = "") -> dict[str, int]:
        return {k: v for k, v in self.db.counters.items() if k.startswith(prefix)}

    def repair_counter(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        with self.db.lock:
            changed_at = self.db.counters_changed_at.get(counter_id)
            if self.db.counters.get(counter_id, 0) != observed or (changed_at is not None and changed_at > quiet_since):
                return False
            self.db.counters[counter_id] = value
            self.db.counters_changed_at[counter_id] = now
            (self.db.held.discard if value == 0 else self.db.held.add)(counter_id)
            return True

    def held_counter_ids(self) -> list[str]:
        with self.db.lock:
            return sorted(self.db.held)

    def held_counters(self) -> dict[str, CounterReading]:
        with self.db.lock:
            held = self.held_counter_ids()
            readings = self.read_counters(held)
            return {counter: readings.get(counter, CounterReading(0)) for counter in held}

    def forget_counter(self, counter_id: str, quiet_since: float) -> bool:
        with self.db.lock:
            changed_at = self.db.counters_changed_at.get(counter_id)
            if counter_id not in self.db.held or self.db.counters.get(counter_id, 0) != 0:
                return False
            if changed_at is not None and changed_at > quiet_since:
                return False
            self.db.held.discard(counter_id)
            return True

    def get(self, operation_id: str) -> Operation | None:
        return self.db.operations.get(operation_id)

    def read_delivery(
        self, operation_id: str, site_id: str, shares: Sequence[str] = (), key_rates: Sequence[str] = ()
    ) -> Delivery:
        with self.db.lock:
            waiting = sum(self.db.waiting.get(share, 0) for share in shares)
            rated = tuple(self.db.key_rates[k] for k in key_rates if k in self.db.key_rates)
            return Delivery(self.db.operations.get(operation_id), self.db.sites.get(site_id), waiting, rated)

    def _update(self, operation_id: str, ok: bool, refusal: type[Exception], **changes: Any) -> None:
        if not ok:
            raise refusal(operation_id)
        self.db.operations[operation_id] = replace(self.db.operations[operation_id], **changes)

    def mark_queued(self, operation_id: str, now: float) -> bool:
        with self.db.lock:
            op = self.db.operations.get(operation_id)
            if op is None:
                return False
            if op.status != Status.ACCEPTED:
                if op.queued_at is None:
                    self._update(operation_id, True, NotRunnable, queued_at=now)
                return False
            self._update(operation_id, True, NotRunnable, status=Status.QUEUED, queued_at=now, updated_at=now)
            return True

    def start_attempt(
        self,
        operation_id: str,
        fence: int,
        now: float,
        slot: Slot | None = None,
        current: Operation | None = None,
        continues_from: int | None = None,
        dependency: DependencyTake | None = None,
    ) -> Operation:
        with self.db.lock:
            op = self.db.operations.get(operation_id)
            if continues_from is not None:
                ok = _continuable(op, continues_from)
                self._update(operation_id, ok, NotRunnable, fence=fence, updated_at=now, continuing=False)
                return self.db.operations[operation_id]
            ok = (
                op is not None
                and op.status in RUNNABLE
                and op.attempt < op.attempt_budget
                and (op.fence is None or op.fence < fence)
            )
            if slot is None and op is not None and current is not None and current.running_slot:
                ok = ok and op.running_slot == current.running_slot  # it keeps the slot it was read holding
            take = slot if ok and op is not None and op.running_slot is None else None
            held = dependency or DependencyTake()
            if take is not None:
                self.db.check_room(take.counter, take.maximum)
            if ok:
                self.db.take_dependencies(held if take is not None else held.keeping_slots(), operation_id, now)
            self._update(
                operation_id,
                ok,
                NotRunnable,
                status=Status.RUNNING,
                attempt=(op.attempt + 1) if op else 0,
                fence=fence,
                started_at=now,
                updated_at=now,
                not_before=None,
                continuing=False,
            )
            if take is not None:
                self.db.bump(take.counter, 1, now)
                self._update(
                    operation_id,
                    True,
                    NotRunnable,
                    running_slot=take.counter,
                    dependency_slots=tuple(s.counter for s in held.slots),
                )
            self._update(operation_id, True, NotRunnable, rate_reserved={})
            return self.db.operations[operation_id]

    def reserve_rates(self, op: Operation, rates: Sequence[RateTake], at: float, now: float) -> bool:
        with self.db.lock:
            row = self.db.operations.get(op.operation_id)
            if (
                row is None
                or row.status not in RUNNABLE
                or (row.epoch, row.attempt) != (op.epoch, op.attempt)
                or any(self.db.dependency_tats.get(rate.counter) != rate.read for rate in rates)
            ):
                return False
            for rate in rates:
                self.db.dependency_tats[rate.counter] = rate.after
            reserved = {**row.rate_reserved, **{rate.counter: at for rate in rates}}
            self.db.operations[op.operation_id] = replace(row, not_before=at, rate_reserved=reserved, updated_at=now)
            return True

    def claim_and_start(
        self,
        op: Operation,
        site: Site,
        now: float,
        lease_s: float,
        slot: Slot | None = None,
        dependency: DependencyTake | None = None,
    ) -> tuple[Lease, Operation] | None:
        with self.db.lock:
            current_site = self.db.sites.get(site.site_id)
            row = self.db.operations.get(op.operation_id)
            fence = site.fence + 1
            if op.continues and op.fence is not None:
                if (
                    current_site is None
                    or current_site.fence != site.fence
                    or not current_site.lease_free_for(op.operation_id, now)
                    or not _continuable(row, op.fence)
                    or row is None
                    or row.running_slot != op.running_slot
                ):
                    return None
                self.db.sites[site.site_id] = replace(
                    current_site, fence=fence, lease_owner=op.operation_id, lease_expires_at=now + lease_s
                )
                continued = row.continued(fence, now)
                self.db.operations[op.operation_id] = continued
                return Lease(site.site_id, op.operation_id, fence, now + lease_s), continued
            if (
                current_site is None
                or current_site.fence != site.fence
                or not current_site.lease_free_for(op.operation_id, now)
                or row is None
                or row.status not in RUNNABLE
                or row.attempt >= row.attempt_budget
                or (row.fence is not None and row.fence >= fence)
                or (slot is not None and row.running_slot is not None)
                or (slot is None and row.running_slot != op.running_slot)
            ):
                return None
            take = dependency or DependencyTake()
            if slot is not None:
                self.db.check_room(slot.counter, slot.maximum)
            self.db.take_dependencies(take if slot is not None else take.keeping_slots(), op.operation_id, now)
            if slot is not None:
                self.db.bump(slot.counter, 1, now)
            self.db.sites[site.site_id] = replace(
                current_site, fence=fence, lease_owner=op.operation_id, lease_expires_at=now + lease_s
            )
            if slot is not None:
                started = row.attempt_started(fence, now, slot.counter, tuple(s.counter for s in take.slots))
            else:
                started = row.attempt_started(fence, now, row.running_slot)
            self.db.operations[op.operation_id] = started
            return Lease(site.site_id, op.operation_id, fence, now + lease_s), started

    @staticmethod
    def _holds_as_read(row: Operation | None, op: Operation) -> bool:
        """The row still holds what `op` read: its epoch's holds, its share place, its wait and its slot."""
        return row is not None and (row.epoch, row.holds, row.share, row.running_slot, row.waiting_at) == (
            op.epoch,
            op.holds,
            op.share,
            op.running_slot,
            op.waiting_at,
        )

    def schedule_retry(self, op: Operation, fence: int, error: ErrorInfo, not_before: float, now: float) -> None:
        with self.db.lock:
            row = self.db.operations.get(op.operation_id)
            ok = (
                row is not None
                and row.status == Status.RUNNING
                and row.fence == fence
                and row.running_slot == op.running_slot
            )
            self._update(
                op.operation_id,
                ok,
                StaleFence,
                status=Status.QUEUED,
                error=error,
                not_before=not_before,
                updated_at=now,
                running_slot=None,
                dependency_slots=(),
            )
            self.db.release((*((op.running_slot,) if op.running_slot else ()), *op.dependency_slots), now)

    def mark_dead(
        self,
        op: Operation,
        fence: int | None,
        error: ErrorInfo,
        now: float,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        with self.db.lock:
            row = self.db.operations.get(op.operation_id)
            ok = (
                row is not None
                and row.status in RUNNABLE
                and (fence is None or row.fence == fence)
                and self._holds_as_read(row, op)
            )
            key = (evidence or {}).get("key")
            event = operation_ended(
                op, Status.DEAD, now, error=error, evidence_key=key if isinstance(key, str) else None
            )
            self._end(op, ok, now, event, status=Status.DEAD, error=error, evidence=evidence)

    def end(
        self,
        op: Operation,
        status: Status,
        now: float,
        *,
        from_statuses: Sequence[Status],
        reason: str = "",
        superseded_by: str | None = None,
    ) -> None:
        with self.db.lock:
            row = self.db.operations.get(op.operation_id)
            ok = row is not None and row.status in from_statuses and self._holds_as_read(row, op)
            self._end(
                op,
                ok,
                now,
                operation_ended(op, status, now, superseded_by=superseded_by),
                status=status,
                error=ErrorInfo(status.value, status.value, reason, False),
                superseded_by=superseded_by,
            )

    def _end(self, op: Operation, ok: bool, now: float, event: Event, **changes: Any) -> None:
        self._update(
            op.operation_id,
            ok,
            NotRunnable,
            finished_at=now,
            updated_at=now,
            holds=(),
            share=None,
            running_slot=None,
            dependency_slots=(),
            rate_reserved={},
            waiting_for=None,
            waiting_at=None,
            **changes,
        )
        self.db.release(held_by(op), now, op.waiting_at)
        self.db.write_event(event)

    def revive(
        self,
        op: Operation,
        now: float,
        limits: Sequence[Slot],
        new_input: tuple[str, str] | None = None,
        share: Placement | None = None,
    ) -> Operation:
        with self.db.lock:
            row = self.db.operations.get(op.operation_id)
            if row is None or row.status != Status.DEAD or row.epoch != op.epoch:
                raise NotRunnable(op.operation_id)
            self._admit(row.principal, row.site_id, limits, None)
            placed = self._place_atomically(limits, share, now)
            changes: dict[str, Any] = {}
            if new_input is not None:
                changes = {"input_key": new_input[0], "input_digest": new_input[1], "inline_input": None}
            self.db.operations[op.operation_id] = replace(
                row,
                status=Status.ACCEPTED,
                epoch=op.epoch + 1,
                attempt=0,
                updated_at=now,
                error=None,
                evidence=None,
                finished_at=None,
                not_before=None,
                queued_at=None,
                started_at=None,
                holds=tuple(slot.counter for slot in limits),
                **placed,
                **changes,
            )
            return self.db.operations[op.operation_id]

    def save_checkpoint(
        self, operation_id: str, fence: int, checkpoint: dict[str, Any], now: float, continues: bool = False
    ) -> None:
        with self.db.lock:
            op = self.db.operations.get(operation_id)
            ours = op is not None and op.status == Status.RUNNING and op.fence == fence
            if not ours:
                raise StaleFence(f"operation {operation_id}: fence {fence} is no longer its attempt's")
            changes: dict[str, Any] = {"checkpoint": dict(checkpoint), "updated_at": now}
            if continues:
                changes["continuing"] = True
            self._update(operation_id, True, StaleFence, **changes)

    def request_cancel(self, operation_id: str, reason: str, now: float) -> None:
        with self.db.lock:
            op = self.db.operations.get(operation_id)
            self._update(
                operation_id,
                op is not None and op.status in RUNNABLE,
                NotRunnable,
                cancel_requested=reason or "cancelled",
                updated_at=now,
            )

    def list(self, *, site_id: str | None = None, status: Status | None = None, limit: int = 100) -> list[Operation]:
        """As DynamoDB orders them: a site's by creation (the by-site index), a status's by last update (by-status),
        the whole table by creation; index reads see what `MemoryDb.indexed` shows (see `lagging_indexes`)."""
        rows = self.db.operations.values() if site_id is None and status is None else self.db.indexed().values()
        ops = [
            op for op in rows if (site_id is None or op.site_id == site_id) and (status is None or op.status == status)
        ]
        if status is not None and site_id is None:
            return sorted(ops, key=lambda op: op.updated_at, reverse=True)[:limit]
        return sorted(ops, key=lambda op: op.created_at, reverse=True)[:limit]

    def page(
        self,
        *,
        site_id: str | None = None,
        status: Status | None = None,
        accept: Callable[[Operation], bool] = lambda op: True,
        cursor: str | None = None,
        limit: int = 100,
        reads: int = 1000,
    ) -> Page[Operation]:
        """In DynamoDB's orders (a site's by creation, a status's by last update, newest first; the table by id),
        reading rows one by one from after the cursor's row, as the store does."""
        read = "site" if site_id is not None else "status" if status is not None else "scan"
        orders: dict[str, Callable[[Operation], tuple[Any, ...]]] = {
            "site": lambda op: (-op.created_at, op.operation_id),
            "status": lambda op: (-op.updated_at, op.operation_id),
            "scan": lambda op: ("", op.operation_id),
        }
        order = orders[read]
        with self.db.lock:
            rows = list(self.db.indexed().values() if read != "scan" else self.db.operations.values())
        rows = [
            op for op in rows if (read != "site" or op.site_id == site_id) and (read != "status" or op.status == status)
        ]
        wanted = (lambda op: op.status == status and accept(op)) if status is not None else accept
        return page_in_order(rows, order, read, wanted, cursor, limit, reads)

    def dead_ids_of_class(self, code: str, reads: int = 10_000) -> Sequence[str]:
        with self.db.lock:
            indexed = [op for op in self.db.indexed().values() if op.status == Status.DEAD and op.error_code == code]
        return [op.operation_id for op in sorted(indexed, key=lambda op: (op.updated_at, op.operation_id))[:reads]]

    def dead_of_class(self, code: str, reads: int = 10_000) -> Sequence[Operation]:
        with self.db.lock:
            rows = [self.db.operations[operation_id] for operation_id in self.dead_ids_of_class(code, reads)]
        return [op for op in rows if op.status == Status.DEAD and op.error_code == code]

    def oldest(self, status: Status, groups: Mapping[str, Collection[Kind]], reads: int = 500) -> dict[str, Operation]:
        with self.db.lock:
            rows = sorted(
                (op for op in self.db.indexed().values() if op.status == status),
                key=lambda op: (op.updated_at, op.operation_id),
            )
        found: dict[str, Operation] = {}
        for op in rows[:reads]:
            for group, kinds in groups.items():
                if op.kind in kinds:
                    found.setdefault(group, op)
        return found


def page_in_order(
    rows: Sequence[T],
    order: Callable[[T], tuple[Any, ...]],
    read: str,
    accept: Callable[[T], bool],
    cursor: str | None,
    limit: int,
    reads: int,
) -> Page[T]:
    """A page of `rows` in `order` from after the cursor's position (the last row read's sort key), as a DynamoDB
    read goes on from its ExclusiveStartKey whether or not that row is still there."""
    ordered = sorted(rows, key=order)
    if cursor is not None:
        position = decode_cursor(cursor, read).get("after")
        if not isinstance(position, list) or len(position) != 2:
            raise InvalidInput("cursor: not one this listing gave (start again without it)", field="cursor")
        ordered = [row for row in ordered if order(row) > tuple(position)]
    found, last = take(ordered, accept, limit, reads)
    more = last is not None and last is not ordered[-1]
    return Page(found, encode_cursor(read, {"after": list(order(last))}) if more and last is not None else None)


class MemorySiteStore:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def get(self, site_id: str) -> Site | None:
        return self.db.sites.get(site_id)

    def get_many(self, site_ids: Sequence[str]) -> dict[str, Site]:
        with self.db.lock:
            return {site_id: self.db.sites[site_id] for site_id in site_ids if site_id in self.db.sites}

    def register(self, site_id: str, principal: str, now: float, connection: SiteConnection | None = None) -> Site:
        with self.db.lock:
            site = self.db.sites.setdefault(
                site_id, Site(site_id, principal, now, connection=connection or SiteConnection())
            )
            return checked_registration(site, principal, connection)

    def set_dependencies(self, site_id: str, dependency_ids: tuple[str, ...]) -> Site:
        with self.db.lock:
            site = self.db.sites.get(site_id)
            if site is None:
                raise NotFound(f"site {site_id} not found")
            self.db.sites[site_id] = replace(site, dependencies=dependency_ids)
            return self.db.sites[site_id]

    def claim_lease(self, site_id: str, operation_id: str, now: float, duration: float) -> Lease:
        with self.db.lock:
            site = self.db.sites.get(site_id)
            if site is None or not site.lease_free_for(operation_id, now):
                raise LeaseHeld(
                    site_id, site.lease_owner if site else None, (site.lease_expires_at or now) if site else now
                )
            site = replace(site, fence=site.fence + 1, lease_owner=operation_id, lease_expires_at=now + duration)
            self.db.sites[site_id] = site
            return Lease(site_id, operation_id, site.fence, now + duration)

    def _holds(self, lease: Lease) -> bool:
        site = self.db.sites.get(lease.site_id)
        return site is not None and site.fence == lease.fence and site.lease_owner == lease.owner

    def extend_lease(self, lease: Lease, now: float, duration: float) -> Lease:
        with self.db.lock:
            if not self._holds(lease):
                raise StaleFence(f"site {lease.site_id}: fence {lease.fence} is no longer current")
            self.db.sites[lease.site_id] = replace(self.db.sites[lease.site_id], lease_expires_at=now + duration)
            return replace(lease, expires_at=now + duration)

    def release_lease(self, lease: Lease) -> bool:
        with self.db.lock:
            if not self._holds(lease):
                return False
            self.db.sites[lease.site_id] = replace(
                self.db.sites[lease.site_id], lease_owner=None, lease_expires_at=None
            )
            return True

    def due(self, now: float, limit: int = 1000) -> list[Site]:
        due = [s for s in self.db.sites.values() if s.next_due_at is not None and s.next_due_at <= now]
        return sorted(due, key=lambda s: s.next_due_at or 0)[:limit]

    def promoted_since(self, since: float, limit: int = 1000) -> list[Site]:
        return [s for s in self.db.sites.values() if s.live_at is not None and s.live_at >= since][:limit]

    def set_paused(self, site_id: str, paused: bool, reason: str | None, by: str, now: float) -> Site:
        with self.db.lock:
            site = self.db.sites.get(site_id)
            if site is None:
                raise NotFound(f"site {site_id} not found")
            updated = replace(
                site,
                paused=paused,
                pause_reason=reason if paused else None,
                paused_by=by if paused else None,
                paused_at=now if paused else None,
                consecutive_failures=site.consecutive_failures if paused else 0,
            )
            self.db.sites[site_id] = updated
            if site.paused != paused:
                self.db.write_event(site_paused(site, paused, reason, by, now))
            return updated

    def hold_until_resumed(self, site_id: str, held: HeldDelivery) -> bool:
        with self.db.lock:
            site = self.db.sites.get(site_id)
            if site is None or not site.paused:
                return False
            self.db.held_deliveries.setdefault(site_id, {})[held.operation_id] = held
            return True

    def delete_empty(self, site_id: str) -> bool:
        with self.db.lock:
            site, counter = self.db.sites.get(site_id), site_counter(site_id)
            if site is None or site.head_version != 0 or self.db.counters.get(counter, 0) != 0:
                return False
            del self.db.sites[site_id]
            self.db.counters.pop(counter, None)
            self.db.counter_owner.pop(counter, None)
            self.db.counter_label.pop(counter, None)
            return True

    def take_held(self, site_id: str) -> tuple[HeldDelivery, ...]:
        with self.db.lock:
            held = self.db.held_deliveries.pop(site_id, {})
            return tuple(held[k] for k in sorted(held))

    def record_failure(self, site_id: str, pause_at: int, reason: str, now: float) -> Site:
        with self.db.lock:
            site = self.db.sites.get(site_id)
            if site is None:
                raise NotFound(f"site {site_id} not found")
            failures = site.consecutive_failures + 1
            pause = failures >= pause_at and not site.paused
            updated = replace(
                site,
                consecutive_failures=failures,
                paused=site.paused or pause,
                pause_reason=reason if pause else site.pause_reason,
                paused_by=AUTOMATIC if pause else site.paused_by,
                paused_at=now if pause else site.paused_at,
            )
            self.db.sites[site_id] = updated
            if pause:
                self.db.write_event(site_paused(updated, True, reason, AUTOMATIC, now))
            return updated

    def list(self, limit: int = 100) -> list[Site]:
        return sorted(self.db.sites.values(), key=lambda s: s.site_id)[:limit]

    def page(
        self,
        *,
        accept: Callable[[Site], bool] = lambda site: True,
        cursor: str | None = None,
        limit: int = 100,
        reads: int = 1000,
    ) -> Page[Site]:
        """By id (the fake's table order), from after the cursor's site."""
        with self.db.lock:
            rows = list(self.db.sites.values())
        return page_in_order(rows, lambda site: ("", site.site_id), "sites", accept, cursor, limit, reads)


class MemoryCommitStore:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db
        self.sites = MemorySiteStore(db)

    def commit(self, prepared: PreparedCommit, now: float) -> None:
        c, lease = prepared.commit, prepared.lease
        with self.db.lock:  # all three conditions are checked before anything is written: a transaction
            if c.operation_id in self.db.commits:
                raise AlreadyCommitted(c.operation_id)
            site = self.db.sites.get(c.site_id)
            if not self.sites._holds(lease) or site is None or site.head_version != prepared.expected_version:
                raise StaleFence(f"site {c.site_id}: fence {lease.fence} is no longer current")
            op = self.db.operations.get(c.operation_id)
            if (
                op is None
                or op.status != Status.RUNNING
                or op.fence != lease.fence
                or op.cancel_requested
                or (prepared.slot is not None and op.running_slot != prepared.slot)
            ):
                raise NotRunnable(c.operation_id)
            pub = prepared.publication
            if pub is not None and (pub.site_id, pub.seq) in self.db.publications:
                raise Conflict(f"publication {pub.site_id}#{pub.seq} already exists")
            if pub is not None:
                self.db.publications[(pub.site_id, pub.seq)] = pub
            self.db.commits[c.operation_id] = c
            self.db.sites[c.site_id] = replace(
                site,
                head_version=c.version,
                head_revision=c.revision_id,
                lease_owner=None,
                lease_expires_at=None,
                consecutive_failures=0,
                next_due_at=prepared.next_due_at,
                avg_operation_s=site.avg_operation_s if prepared.avg_operation_s is None else prepared.avg_operation_s,
            )
            self.db.release((*prepared.counters, *((prepared.slot,) if prepared.slot else ())), now)
            for tally in prepared.tallies:
                MemoryMinuteBuckets(self.db).add(tally.bucket_id, tally.minute, tally.count, tally.amount)
            self.db.operations[c.operation_id] = replace(
                op,
                status=Status.SUCCEEDED,
                result=prepared.result,
                finished_at=now,
                updated_at=now,
                error=None,
                running_slot=None,
                dependency_slots=(),
                rate_reserved={},
                holds=(),
                share=None,
            )
            if prepared.event is not None:
                self.db.write_event(prepared.event)

    def get(self, operation_id: str) -> Commit | None:
        return self.db.commits.get(operation_id)

    def history(self, site_id: str, limit: int = 100) -> list[Commit]:
        commits = [c for c in self.db.commits.values() if c.site_id == site_id]
        return sorted(commits, key=lambda c: c.version, reverse=True)[:limit]


class MemoryPublicationStore:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def get(self, site_id: str, seq: int) -> Publication | None:
        return self.db.publications.get((site_id, seq))

    def _change(self, site_id: str, seq: int, ok: Callable[[Publication], bool], **changes: Any) -> Publication:
        with self.db.lock:
            pub = self.db.publications.get((site_id, seq))
            if pub is None:
                raise NotFound(f"publication {site_id}#{seq}")
            if not ok(pub):
                raise Conflict(f"publication {site_id}#{seq} is {pub.status.value}")
            updated = replace(pub, **{k: (v(pub) if callable(v) else v) for k, v in changes.items()})
            self.db.publications[(site_id, seq)] = updated
            return updated

    def plan(self, site_id: str, seq: int, total_chunks: int, now: float) -> Publication:
        return self._change(site_id, seq, lambda p: p.total_chunks in (None, total_chunks), total_chunks=total_chunks)

    def chunk_done(self, site_id: str, seq: int, chunk: int) -> Publication:
        return self._change(
            site_id, seq, lambda p: p.total_chunks is not None, done_chunks=lambda p: p.done_chunks | {chunk}
        )

    def step_failed(self, site_id: str, seq: int, failure: str, retried: bool) -> None:
        with self.db.lock:
            pub = self.db.publications.get((site_id, seq))
            if pub is not None:
                self.db.publications[(site_id, seq)] = replace(
                    pub, last_failure=failure[:MAX_FAILURE_CHARS], retried_steps=pub.retried_steps + int(retried)
                )

    def publish(self, site_id: str, seq: int, revision_id: str, now: float, event: Event) -> bool:
        with self.db.lock:
            site = self.db.sites.get(site_id)
            publication = self.db.publications.get((site_id, seq))
            unfinished = (PublicationStatus.PENDING, PublicationStatus.PLANNED)
            if site is None or site.live_seq >= seq or publication is None or publication.status not in unfinished:
                return False
            self.db.sites[site_id] = replace(site, live_seq=seq, live_revision=revision_id, live_at=now)
            self.db.publications[(site_id, seq)] = replace(
                publication, status=PublicationStatus.PUBLISHED, finished_at=now
            )
            self.db.write_event(event)
            return True

    def finish(self, site_id: str, seq: int, status: PublicationStatus, now: float) -> None:
        with contextlib.suppress(Conflict):
            self._change(
                site_id,
                seq,
                lambda p: p.status in (PublicationStatus.PENDING, PublicationStatus.PLANNED),
                status=status,
                finished_at=now,
            )

    def get_with_site(self, site_id: str, seq: int) -> tuple[Publication | None, Site | None]:
        with self.db.lock:
            return self.db.publications.get((site_id, seq)), self.db.sites.get(site_id)

    def open_before(self, before: float, limit: int = 1000) -> list[Publication]:
        open_ = (PublicationStatus.PENDING, PublicationStatus.PLANNED)
        found = [p for p in self.db.publications.values() if p.status in open_ and p.created_at < before]
        return sorted(found, key=lambda p: p.created_at)[:limit]

    def list(self, site_id: str, limit: int = 100) -> list[Publication]:
        pubs = [p for (s, _), p in self.db.publications.items() if s == site_id]
        return sorted(pubs, key=lambda p: p.seq, reverse=True)[:limit]


class MemoryQuotaStore:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db
        self.quotas: dict[str, Quota] = {}

    def get(self, principal: str, tenant: str | None = None) -> Quota | None:
        return self.quotas.get(quota_key(principal, tenant))

    def put(self, quota: Quota, bounds: Mapping[str, int | None]) -> None:
        with self.db.lock:
            self.quotas[quota_key(quota.principal, quota.tenant)] = quota
            for counter, maximum in bounds.items():
                if maximum is None:
                    self.db.counter_maximum.pop(counter, None)
                else:
                    self.db.counter_maximum[counter] = maximum

    def key_rates(self, principal: str, tenant: str | None = None) -> KeyRates | None:
        with self.db.lock:
            return self.db.key_rates.get(key_rates_key(principal, tenant))

    def put_key_rates(self, rates: KeyRates) -> None:
        with self.db.lock:
            if rates.rates:
                self.db.key_rates[key_rates_key(rates.principal, rates.tenant)] = rates
            else:
                self.db.key_rates.pop(key_rates_key(rates.principal, rates.tenant), None)

    def clear(self, principal: str, tenant: str | None, bounds: Sequence[str]) -> bool:
        with self.db.lock:
            if self.quotas.pop(quota_key(principal, tenant), None) is None:
                return False
            for counter in bounds:
                self.db.counter_maximum.pop(counter, None)
            return True


class MemoryDependencyStore:
    """Dependencies kept in the fake's tables as the DynamoDB store keeps them on the counters table."""

    EVIDENCE_KEPT = 10

    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def read(self, dependency_ids: Sequence[str], kind: Kind, also: Sequence[str] = ()) -> DependencyReading:
        with self.db.lock:
            buckets = [*also] + [rate_key(i, Rate(1, 1.0, kind=k)) for i in dependency_ids for k in (None, kind)]
            return DependencyReading(
                {i: self.db.dependencies[i] for i in dependency_ids if i in self.db.dependencies},
                self._running(dependency_ids),
                {b: self.db.dependency_tats[b] for b in buckets if b in self.db.dependency_tats},
            )

    def get(self, dependency_id: str) -> Dependency | None:
        with self.db.lock:
            return self.db.dependencies.get(dependency_id)

    def hold(self, dependency_id: str, held: HeldDelivery, now: float) -> bool:
        with self.db.lock:
            kept = self.db.dependency_held.setdefault((dependency_id, held.lane), {})
            if held.operation_id not in kept and len(kept) >= HELD_KEPT:
                return False
            kept[held.operation_id] = (now, held.receipt)
            return True

    def take_held(self, dependency_id: str, lane: str, limit: int | None = None) -> tuple[HeldDelivery, ...]:
        with self.db.lock:
            kept = self.db.dependency_held.get((dependency_id, lane), {})
            oldest = sorted(kept.items(), key=lambda pair: (pair[1][0], pair[0]))[:limit]
            for operation_id, _ in oldest:
                del kept[operation_id]
            return tuple(HeldDelivery(operation_id, lane, receipt) for operation_id, (_, receipt) in oldest)

    def list(self, dependency_ids: Collection[str] | None = None) -> list[Dependency]:
        with self.db.lock:
            ids = sorted(self.db.dependency_index if dependency_ids is None else set(dependency_ids))
            return [self.db.dependencies.get(i) or Dependency(i) for i in ids]

    def running(self, dependency_ids: Sequence[str]) -> dict[str, int]:
        with self.db.lock:
            return self._running(dependency_ids)

    def _running(self, dependency_ids: Sequence[str]) -> dict[str, int]:
        return {i: sum(self.db.counters.get(s, 0) for s in running_shards(i)) for i in dependency_ids}

    def named(self, dependency_ids: Sequence[str], principal: str, site_id: str, now: float) -> None:
        with self.db.lock:
            for i in dependency_ids:
                self.db.dependency_index.add(i)
                current = self.db.dependencies.get(i) or Dependency(i)
                self.db.dependencies[i] = replace(
                    current, principals=current.principals | {principal}, sites=current.sites | {site_id}
                )

    def unnamed(self, dependency_ids: Sequence[str], site_id: str, principal: str | None, now: float) -> None:
        with self.db.lock:
            for i in dependency_ids:
                current = self.db.dependencies.get(i) or Dependency(i)
                principals = current.principals - {principal} if principal is not None else current.principals
                self.db.dependencies[i] = replace(current, principals=principals, sites=current.sites - {site_id})

    def buckets(self, counters: Sequence[str]) -> dict[str, float]:
        with self.db.lock:
            return {c: self.db.dependency_tats[c] for c in counters if c in self.db.dependency_tats}

    def put_settings(
        self, dependency_id: str, max_running: int | None, rates: tuple[Rate, ...], by: str, reason: str, now: float
    ) -> Dependency:
        with self.db.lock:
            current = self.db.dependencies.get(dependency_id) or Dependency(dependency_id)
            self.db.dependencies[dependency_id] = current.with_settings(max_running, rates, by, reason, now)
            self.db.dependency_index.add(dependency_id)
            return self.db.dependencies[dependency_id]

    def pause(self, dependency_id: str, reason: str, by: str, now: float) -> Dependency | None:
        with self.db.lock:
            current = self.db.dependencies.get(dependency_id) or Dependency(dependency_id)
            if current.state == BreakerState.PAUSED:
                return None
            changed = replace(current, state=BreakerState.PAUSED, reason=reason, changed_by=by, changed_at=now)
            return self._change(changed, blocked=True, paused=True, by=by, now=now, reason=reason)

    def resume(self, dependency_id: str, by: str, now: float, probe: str | None = None) -> Dependency | None:
        with self.db.lock:
            current = self.db.dependencies.get(dependency_id)
            if current is None or current.state == BreakerState.CLOSED:
                return None
            if probe is not None and (current.state != BreakerState.HALF_OPEN or current.probe != probe):
                return None
            changed = replace(
                current,
                state=BreakerState.CLOSED,
                changed_by=by,
                changed_at=now,
                reason=None,
                reopen_at=None,
                probe=None,
                probe_at=None,
            )
            return self._change(changed, blocked=False, paused=False, by=by, now=now)

    def open(
        self, dependency_id: str, reason: str, evidence: tuple[dict[str, Any], ...], now: float, cooldown_s: float
    ) -> Dependency | None:
        with self.db.lock:
            current = self.db.dependencies.get(dependency_id) or Dependency(dependency_id)
            if current.state != BreakerState.CLOSED:
                return None
            changed = replace(
                current,
                state=BreakerState.OPEN,
                reason=reason,
                changed_by=BREAKER,
                changed_at=now,
                reopen_at=now + cooldown_s,
                evidence=evidence,
                cooldown_s=cooldown_s,
            )
            return self._change(
                changed, blocked=True, paused=True, by=BREAKER, now=now, reason=reason, evidence=evidence
            )

    def elect_probe(self, dependency_id: str, operation_id: str, now: float, probe_timeout_s: float) -> bool:
        with self.db.lock:
            current = self.db.dependencies.get(dependency_id)
            due = current is not None and (
                (current.state == BreakerState.OPEN and (current.reopen_at or 0.0) <= now)
                or (
                    current.state == BreakerState.HALF_OPEN
                    and ((current.probe_at or 0.0) < now - probe_timeout_s or current.probe == operation_id)
                )
            )
            if current is None or not due:
                return False
            self.db.dependencies[dependency_id] = replace(
                current, state=BreakerState.HALF_OPEN, probe=operation_id, probe_at=now
            )
            for shard in running_shards(dependency_id):
                self.db.dependency_flags[shard] = (True, operation_id)
            return True

    def probe_failed(self, dependency_id: str, operation_id: str, now: float, cooldown_max_s: float) -> bool:
        with self.db.lock:
            current = self.db.dependencies.get(dependency_id)
            if current is None or current.state != BreakerState.HALF_OPEN or current.probe != operation_id:
                return False
            cooldown = min((current.cooldown_s or 1.0) * 2, cooldown_max_s)
            self.db.dependencies[dependency_id] = replace(
                current,
                state=BreakerState.OPEN,
                reopen_at=now + cooldown,
                cooldown_s=cooldown,
                probe=None,
                probe_at=None,
            )
            for shard in running_shards(dependency_id):
                self.db.dependency_flags[shard] = (True, None)
            return True

    def record_failure(
        self, dependency_id: str, failure: dict[str, Any], now: float, *, window_s: float
    ) -> tuple[int, int, tuple[dict[str, Any], ...]]:
        with self.db.lock:
            window = self.db.dependency_failures.setdefault(failures_key(dependency_id, int(now // window_s)), [])
            window.append(dict(failure))
            return len(window), len({f["site_id"] for f in window}), tuple(window[-self.EVIDENCE_KEPT :])

    def _change(
        self,
        changed: Dependency,
        *,
        blocked: bool,
        paused: bool,
        by: str,
        now: float,
        reason: str | None = None,
        evidence: Any = None,
    ) -> Dependency:
        """The state, its flag on every running shard and one event per principal whose site names it."""
        self.db.dependencies[changed.dependency_id] = changed
        for shard in running_shards(changed.dependency_id):
            self.db.dependency_flags[shard] = (blocked, None)
        for principal in sorted(changed.principals):
            told = dependency_changed(changed.dependency_id, principal, paused, by, now, reason, evidence or ())
            self.db.write_event(told)
        return changed


class MemoryMinuteBuckets:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def add(self, bucket_id: str, minute: int, count: int, amount: int) -> None:
        with self.db.lock:
            current = self.db.buckets.get(bucket_id) or Bucket(minute, 0, 0)
            self.db.buckets[bucket_id] = Bucket(minute, current.count + count, current.amount + amount)
            self.db.counter_expiry[bucket_id] = expires_at(minute)

    def read(self, bucket_ids: Sequence[str]) -> dict[str, Bucket]:
        with self.db.lock:
            return {b: self.db.buckets[b] for b in bucket_ids if b in self.db.buckets}


class MemoryAuditLog:
    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    def record(self, entry: AuditEntry) -> None:
        self.entries.append(entry)

    def list(
        self,
        since: float,
        until: float,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        site_id: str | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        wanted = {"actor": actor, "action": action, "target": target, "site_id": site_id}
        found = [
            e
            for e in self.entries
            if since <= e.at <= until and all(v is None or getattr(e, k) == v for k, v in wanted.items())
        ]
        return sorted(found, key=lambda e: e.at, reverse=True)[:limit]


class MemoryEventLog:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def get_many(self, event_ids: Sequence[str]) -> list[StoredEvent]:
        with self.db.lock:
            return [self.db.events[i] for i in dict.fromkeys(event_ids) if i in self.db.events]

    def last_seq(self, principal: str) -> int:
        with self.db.lock:
            feed = self.db.feed.get(principal, [])
            return feed[-1].seq if feed else 0

    def append(self, principal: str, events: Sequence[Event], after: int) -> bool:
        with self.db.lock:
            feed = self.db.feed.setdefault(principal, [])
            if (feed[-1].seq if feed else 0) != after:
                return False
            if any(self.db.events[e.event_id].seq is not None for e in events):
                return False
            for n, event in enumerate(events, start=after + 1):
                feed.append(FeedEntry(n, event))
                self.db.events[event.event_id] = replace(self.db.events[event.event_id], seq=n, on_bus=True)
                self.db.undelivered.discard(event.event_id)
            return True

    def undelivered(self, before: float, limit: int = 1000) -> list[EventMessage]:
        with self.db.lock:
            found = [self.db.events[i].event for i in self.db.undelivered if self.db.events[i].event.time < before]
            return [EventMessage.of(e) for e in sorted(found, key=lambda e: e.time)[:limit]]

    def read(self, principal: str, after: int, limit: int) -> list[FeedEntry]:
        with self.db.lock:
            return [entry for entry in self.db.feed.get(principal, []) if entry.seq > after][:limit]


class MemoryEventQueue:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def send(self, message: EventMessage) -> None:
        with self.db.lock:
            self.db.announced.append(message)


class MemoryEventBus:
    def __init__(self) -> None:
        self.put_events: list[Event] = []

    def put(self, events: Sequence[Event]) -> None:
        self.put_events.extend(events)


class MemoryWebhookStore:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def create(self, endpoint: Endpoint) -> Endpoint:
        with self.db.lock:
            if endpoint.endpoint_id in self.db.endpoints:
                raise AssertionError(f"endpoint {endpoint.endpoint_id} created twice")
            created = self.db.endpoints[endpoint.endpoint_id] = replace(endpoint, version=1)
            return created

    def get(self, principal: str, endpoint_id: str) -> Endpoint | None:
        with self.db.lock:
            found = self.db.endpoints.get(endpoint_id)
            return found if found is not None and found.principal == principal else None

    def owned(self, principal: str) -> list[Endpoint]:
        with self.db.lock:
            mine = [e for e in self.db.endpoints.values() if e.principal == principal]
            return sorted(mine, key=lambda e: (e.created_at, e.endpoint_id))

    def due(self, before: float, limit: int = 1000) -> list[Endpoint]:
        with self.db.lock:
            return [
                e
                for e in self.db.endpoints.values()
                if e.enabled
                and (e.replay is not None or (e.next_attempt_at is not None and e.next_attempt_at < before))
            ][:limit]

    def save(self, endpoint: Endpoint, event: Event | None = None) -> Endpoint | None:
        with self.db.lock:
            current = self.db.endpoints.get(endpoint.endpoint_id)
            if current is None or current.version != endpoint.version:
                return None
            saved = replace(endpoint, version=endpoint.version + 1)
            self.db.endpoints[endpoint.endpoint_id] = saved
            if event is not None:
                self.db.write_event(event)
            return saved

    def delete(self, principal: str, endpoint_id: str) -> bool:
        with self.db.lock:
            found = self.db.endpoints.get(endpoint_id)
            if found is None or found.principal != principal:
                return False
            del self.db.endpoints[endpoint_id]
            for key in [k for k in self.db.webhook_deliveries if k[0] == endpoint_id]:
                del self.db.webhook_deliveries[key]
            return True

    def record(self, endpoint_id: str, entry: FeedEntry, attempt: Attempt) -> None:
        with self.db.lock:
            key = (endpoint_id, entry.seq)
            known = self.db.webhook_deliveries.get(key) or WebhookDelivery(
                endpoint_id, entry.seq, entry.event.event_id, entry.event.type
            )
            self.db.webhook_deliveries[key] = replace(known, attempts=(*known.attempts, attempt))

    def deliveries(self, endpoint_id: str, before: int | None, limit: int) -> list[WebhookDelivery]:
        with self.db.lock:
            mine = [
                d
                for (owner, seq), d in self.db.webhook_deliveries.items()
                if owner == endpoint_id and (before is None or seq < before)
            ]
            return sorted(mine, key=lambda d: d.seq, reverse=True)[:limit]


class MemoryWebhookSecrets:
    def __init__(self) -> None:
        self.secrets: dict[str, tuple[str, str | None, float]] = {}  # id -> (current, previous, previous until)

    def create(self, endpoint_id: str) -> str:
        secret = new_secret()
        self.secrets[endpoint_id] = (secret, None, 0.0)
        return secret

    def signing(self, endpoint_id: str, now: float) -> list[str]:
        return signing_secrets(*self.secrets[endpoint_id], now)

    def rotate(self, endpoint_id: str, now: float) -> tuple[str, float]:
        current = self.secrets[endpoint_id][0]
        secret, until = new_secret(), now + ROTATION_OVERLAP_S
        self.secrets[endpoint_id] = (secret, current, until)
        return secret, until

    def delete(self, endpoint_id: str) -> None:
        self.secrets.pop(endpoint_id, None)


class MemoryWebhookQueue:
    def __init__(self) -> None:
        self.sent: list[WebhookMessage] = []

    def send(self, message: WebhookMessage) -> None:
        self.sent.append(message)


@dataclass
class ScriptedReceiver:
    """A webhook receiver as a WebhookSender: answers each POST with the next of `answers` (then `then`), and keeps
    what it was sent."""

    answers: list[AttemptResult] = field(default_factory=list)
    then: AttemptResult = field(default_factory=lambda: AttemptResult(204, 0.01))
    received: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    def send(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        self.received.append((url, dict(headers), body))
        return self.answers.pop(0) if self.answers else self.then


class MemoryPublicationQueue:
    def __init__(self) -> None:
        self.sent: list[PublicationMessage] = []

    def send(self, message: PublicationMessage) -> str:
        self.sent.append(message)
        return f"p{len(self.sent)}"


class MemoryBlobStore:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def put_if_absent(
        self, key: str, body: bytes | IO[bytes], content_type: str = "application/json", sha256: str | None = None
    ) -> bool:
        if not isinstance(body, bytes):
            body = body.read()
        if sha256 is not None and hashlib.sha256(body).hexdigest() != sha256:
            raise InvalidInput(f"{key}: the body is not the declared SHA-256", field="sha256")  # S3's BadDigest
        with self.lock:
            if key in self.objects:
                return False
            self.objects[key] = body
            return True

    def get(self, key: str) -> bytes:
        try:
            return self.objects[key]
        except KeyError:
            raise NotFound(key) from None

    def open(self, key: str, start: int = 0, end: int | None = None) -> IO[bytes]:
        return io.BytesIO(self.get(key)[start:end])

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        body = self.objects.get(key)
        return None if body is None else (body, '"' + hashlib.md5(body).hexdigest() + '"')  # S3's ETag: quoted

    def describe(self, key: str) -> StoredObject | None:
        body = self.objects.get(key)
        return None if body is None else StoredObject(len(body), hashlib.sha256(body).hexdigest())

    def replace(self, key: str, body: bytes, expected_etag: str | None, content_type: str = "application/json") -> bool:
        with self.lock:
            current = self.read_versioned(key)
            if (current[1] if current else None) != expected_etag:
                return False
            self.objects[key] = body
            return True


@dataclass
class SentMessage:
    message: QueueMessage
    dedup_id: str
    attributes: dict[str, str] = field(default_factory=dict)
    lane: str = "operations"


class MemoryQueue:
    def __init__(self) -> None:
        self.sent: list[SentMessage] = []
        self.dead: list[SentMessage] = []
        self.woken: list[tuple[str, str]] = []  # (lane, receipt) made visible (it holds no received messages)

    def send(self, message: QueueMessage, dedup_id: str, lane: str) -> str:
        self.sent.append(SentMessage(message, dedup_id, lane=lane))
        return f"m{len(self.sent)}"

    def send_many(self, messages: Sequence[tuple[QueueMessage, str]], lane: str) -> None:
        for message, dedup_id in messages:
            self.send(message, dedup_id, lane)

    def wake(self, lane: str, receipts: Sequence[str]) -> int:
        self.woken += [(lane, receipt) for receipt in receipts]
        return len(receipts)

    def dead_letter(self, message: QueueMessage, dedup_id: str, attributes: dict[str, str], lane: str) -> str:
        self.dead.append(SentMessage(message, dedup_id, dict(attributes), lane=lane))
        return f"d{len(self.dead)}"

    def sweep_dead_letters(
        self, lane: str, remove: Callable[[DeadLetter], bool], max_messages: int = 1000
    ) -> tuple[list[DeadLetter], list[DeadLetter]]:
        removed: list[DeadLetter] = []
        kept: list[DeadLetter] = []
        remaining: list[SentMessage] = []
        for sent in self.dead:
            letter = DeadLetter(sent.lane, dict(sent.attributes), None)
            if sent.lane != lane or len(removed) + len(kept) >= max_messages:
                remaining.append(sent)
            elif remove(letter):
                removed.append(letter)
            else:
                kept.append(letter)
                remaining.append(sent)
        self.dead = remaining
        return removed, kept


class RecordingVisibility:
    def __init__(self, receipt: str = "receipt-1") -> None:
        self.changes: list[float] = []
        self.receipt = receipt

    def change(self, seconds: float) -> None:
        self.changes.append(seconds)


@dataclass
class MemoryWorld:
    """Every fake port wired together, as `Dependencies` wires the AWS ones."""

    clock: FakeClock = field(default_factory=FakeClock)
    db: MemoryDb = field(default_factory=MemoryDb)
    blobs: MemoryBlobStore = field(default_factory=MemoryBlobStore)
    queue: MemoryQueue = field(default_factory=MemoryQueue)
    publication_queue: MemoryPublicationQueue = field(default_factory=MemoryPublicationQueue)

    def __post_init__(self) -> None:
        self.operations = MemoryOperationStore(self.db)
        self.sites = MemorySiteStore(self.db)
        self.commits = MemoryCommitStore(self.db)
        self.publications = MemoryPublicationStore(self.db)
        self.audit = MemoryAuditLog()
        self.quotas = MemoryQuotaStore(self.db)
        self.events = MemoryEventLog(self.db)
        self.event_queue = MemoryEventQueue(self.db)
        self.event_bus = MemoryEventBus()
        self.webhooks = MemoryWebhookStore(self.db)
        self.webhook_secrets = MemoryWebhookSecrets()
        self.webhook_queue = MemoryWebhookQueue()
        self.dependency_store = MemoryDependencyStore(self.db)


def conforming_ports(
    world: MemoryWorld,
) -> tuple[
    OperationStore,
    SiteStore,
    CommitStore,
    PublicationStore,
    QuotaStore,
    AuditLog,
    BlobStore,
    OperationQueue,
    PublicationQueue,
    Clock,
    MinuteBuckets,
    Visibility,
    EventLog,
    EventQueue,
    EventBus,
    WebhookStore,
    WebhookSecrets,
    WebhookQueue,
    WebhookSender,
    DependencyStore,
]:
    """Every fake as the port it stands in for: mypy checks each one's methods against the port's protocol here, as
    it checks the AWS adapters in `Dependencies` (the contract suite checks that they behave alike)."""
    return (
        world.operations,
        world.sites,
        world.commits,
        world.publications,
        world.quotas,
        world.audit,
        world.blobs,
        world.queue,
        world.publication_queue,
        world.clock,
        MemoryMinuteBuckets(world.db),
        RecordingVisibility(),
        world.events,
        world.event_queue,
        world.event_bus,
        world.webhooks,
        world.webhook_secrets,
        world.webhook_queue,
        ScriptedReceiver(),
        world.dependency_store,
    )
