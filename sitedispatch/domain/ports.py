"""The ports the core talks through. AWS adapters live in `sitedispatch.aws`; tests use in-memory fakes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from sitedispatch.domain.dependencies import Dependency, DependencyReading, DependencyTake, KeyRates, Rate, RateTake
from sitedispatch.domain.errors import Conflict, SiteTaken
from sitedispatch.domain.events import Event, EventMessage, FeedEntry, StoredEvent
from sitedispatch.domain.model import (
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
from sitedispatch.domain.paging import Page
from sitedispatch.domain.webhooks import Attempt, AttemptResult, Endpoint, WebhookDelivery, WebhookMessage

RELEASE_LOOKAHEAD = 25  # waiting operations a release passing over one kind reads (one Query)


def foreign_site(site_id: str) -> SiteTaken:
    """The refusal of a site id to anyone but its owner when it would create or claim it (registration, a first
    provision, the owner kept on the site's counter): ids are one namespace, so that one is taken. Every other
    route answers another's site as a missing one (404)."""
    return SiteTaken(f"site id {site_id} is taken by another principal (site ids are one namespace): choose another")


def checked_registration(site: Site, principal: str, connection: SiteConnection | None) -> Site:
    """The rule every SiteStore applies after its conditional create: a site has one owner and one connection."""
    if site.principal != principal:
        raise foreign_site(site.site_id)
    if connection is not None and connection != site.connection:
        raise Conflict(
            f"site {site.site_id} is registered as {site.connection.describe()}; it cannot become "
            f"{connection.describe()} (register another site id)"
        )
    return site


@dataclass(frozen=True)
class SiteOwner:
    """The counter (a site's admission counter) that names a site's owner, checked in the submit transaction so a
    submit reads nothing first. `claim`: record the principal when the counter names no one yet (the caller has
    checked the site's registration, or `register`: the site is registered in the same transaction as a reference
    site of the principal, while it is not registered at all; else SiteRegistered, writing nothing). `label`: the
    dependency set the caller believes the counter names for the site's work to wait by (flow/counters.py
    `dependency_label`); another is LabelMoved, carrying the counter's, writing nothing."""

    counter: str
    claim: bool = False
    register: bool = False
    label: str = ""


@dataclass(frozen=True)
class Slot:
    """A place under a running cap: `counter` may count at most `maximum` attempts at once."""

    counter: str
    maximum: int


@dataclass(frozen=True)
class Placement:
    """Where an operation goes in its fairness key's share of a lane's queue (see flow/shares.py).

    Not `waits`: it takes a place of `slot` while that shard has room and nothing waits on it (and, given `guard`,
    another shard of the share, while nothing waits on `guard` either: the home shard, where its site's earlier
    operations would wait). `waits`: it waits for `group`, counted on `slot`, while that shard has no room or others
    wait on it. Either refused writes nothing (ShareMoved)."""

    slot: Slot
    group: str
    waits: bool = False
    guard: str | None = None


@dataclass(frozen=True)
class Move:
    """A group of operations' places on one counter, written at once: `count` more, while the counter stays at or
    under `maximum` and carries no maximum of its own (an operator's quota: the group goes one by one then). `owner`:
    the counter is a site's and must name the operations' principal; with `register` (the site's id), it must name
    no one yet, and is claimed for the principal as the site is registered (as a reference site, while it is not
    registered at all). `share`: a share's shard, where nothing may wait. `label`: with `owner`, the dependency set the
    site's counter must name (SiteOwner's)."""

    counter: str
    count: int
    maximum: int
    owner: bool = False
    share: bool = False
    register: str | None = None
    label: str = ""


@dataclass(frozen=True)
class UnsentGroup:
    """Operations a batch wrote `queued` in one transaction, recorded there until their messages are sent."""

    group_id: str
    operation_ids: tuple[str, ...]
    created_at: float


@dataclass(frozen=True)
class CounterReading:
    """A counter as read: its value, the maximum an operator's quota keeps on it (None: the deployment's), how
    many operations wait counted on it (a share's shard), and the principal owning the site (a site's counter)."""

    value: int
    maximum: int | None = None
    waiting: int = 0
    owner: str | None = None


@dataclass(frozen=True)
class Delivery:
    """What a worker reads before it acts on a message: the operation, the site the message names, and how many
    operations wait for the share of the lane the operation's fairness key has (so a finish knows whether to
    release one)."""

    operation: Operation | None
    site: Site | None
    waiting: int = 0
    key_rates: tuple[KeyRates, ...] = ()  # an operator's rates on the operation's fairness key (and its principal)


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class OperationStore(Protocol):
    """Operation rows and the flow-control counters their transitions move. What an operation holds is on its row
    (`holds`, `share` or `waiting_at`, `running_slot`): a transition that ends it releases exactly those, and is
    conditional on the row still holding them (its epoch, share, wait and slot as read), so each is released once."""

    def create(
        self,
        op: Operation,
        limits: Sequence[Slot] = (),
        owner: SiteOwner | None = None,
        share: Placement | None = None,
    ) -> Operation:
        """Insert, holding `limits` (the row's `holds`), and in the same transaction add 1 to each limit's counter
        while under its maximum (the counter's own, an operator's, else the slot's). Raises AlreadyExists if the id
        is taken (first, whatever else failed), LimitReached (writing nothing) if a counter is full. With `owner`,
        the transaction also requires its counter to name the op's principal as the site's owner (UnclaimedSite
        when it names none, writing nothing; with `owner.claim` it records it then). With `share`, the operation is
        placed as the Placement says (ShareMoved, writing nothing, when its condition fails); one that waits must
        not be sent until `release_waiting` releases it. The operation as written."""

    def create_group(self, ops: Sequence[Operation], moves: Sequence[Move]) -> bool:
        """Insert several operations, each holding what its row says (`holds`, `share`), make the `moves` on their
        counters, and record the group as unsent (named by its first operation's id, until `sent`), in one
        transaction: all of it, or (an id taken, a counter too full or under a quota, a site not the principal's, a
        wait on a share) nothing, answered False. The caller then creates them one by one, which tells those
        apart."""

    def sent(self, groups: Sequence[str]) -> None:
        """The groups' messages are sent: their unsent records go (one that is already gone is no error)."""

    def unsent(self, created_before: float) -> list[UnsentGroup]:
        """The groups recorded unsent before `created_before`: the reconciler sends what a crash left unsent."""

    def release_waiting(self, group: str, into: Slot, now: float, limit: int = 1) -> list[Operation]:
        """Up to `limit` operations waiting for the share `group`, oldest first, each leaving the wait (and the shard
        that counted it) and taking a place of the shard `into` in one transaction, while `into` has room. The
        caller sends them and marks them queued (one released and never sent is an accepted orphan: the reconciler
        sends it)."""

    def hand_over(self, op: Operation, group: str, now: float, passing: Kind) -> Operation | None:
        """A queued operation a rate of its kind holds hands its place of the share `group` to the oldest operation
        waiting for it (among the first RELEASE_LOOKAHEAD) that is of another kind and of a site with none of
        `passing` waiting ahead of it (a site's order holds), in one transaction: `op`'s row forgets the place (its
        end frees none), the other's takes it and leaves its wait. The one released (the caller sends it), or None,
        writing nothing: none such waits, or `op` is not as read (its epoch and share)."""

    def relabel_site(self, site_id: str, label: str) -> bool:
        """The site's counter names `label` as the dependency set its work waits by, while the site has no
        operation outstanding (so none of its work waits in another set's share, and its order holds); True when
        the counter names it now. False, writing nothing, while some are outstanding: the end of the last one
        relabels."""

    def counter(self, counter_id: str) -> int: ...

    def counters(self, prefix: str = "") -> dict[str, int]: ...

    def read_counters(self, counter_ids: Sequence[str]) -> dict[str, CounterReading]:
        """The counters named (absent ones as zero), consistently, in one round trip per 100."""

    def held_counter_ids(self) -> list[str]:
        """The ids of `held_counters` (the by-held index alone): a reader then reads only those it needs."""

    def held_counters(self) -> dict[str, CounterReading]:
        """Every counter moved up since a recount last found it at zero and quiet, as read (consistently): what a
        recount compares (a counter nobody moved cannot have drifted) and what the fleet's status sums, since
        every counter above zero is among them. Grows with recent traffic, not with the fleet."""

    def repair_counter(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        """Set a drifted counter to `value`, only if it still holds `observed` and has not moved since
        `quiet_since` (so a recount that raced with traffic never overwrites it). False when it moved. Set to zero,
        it leaves `held_counters`."""

    def forget_counter(self, counter_id: str, quiet_since: float) -> bool:
        """A counter at zero that has not moved since `quiet_since` leaves `held_counters` (until it moves again)."""

    def get(self, operation_id: str) -> Operation | None: ...

    def read_delivery(
        self, operation_id: str, site_id: str, shares: Sequence[str] = (), key_rates: Sequence[str] = ()
    ) -> Delivery:
        """The operation and a site (the one a message names), both current, the waiting counts of the `shares`
        counters summed, and the fairness key's rate settings (`key_rates`: their items), in one round trip."""

    def mark_queued(self, operation_id: str, now: float) -> bool:
        """accepted -> queued at `now`, the send's time. False when the operation had already moved on (a worker
        that received the message first): its `queued_at` is then set all the same, unless it has one."""

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
        """Spend one attempt: runnable, attempt < budget and no attempt under a newer fence, else NotRunnable.
        Given a `slot`, the attempt also takes one of that running counter (under its maximum, else LimitReached,
        writing nothing) unless the row still holds one from an attempt that died. `current` (the row as the caller
        read it) saves re-reading the row after a slot was taken (what the conditions do not pin, a cancel request,
        the commit's own condition still honours). With `continues_from` (the fence a continuation was recorded
        under): no attempt is spent; the running attempt moves to `fence`, once, while the row is running, flagged
        `continuing` and still under that fence (else NotRunnable)."""

    def claim_and_start(
        self,
        op: Operation,
        site: Site,
        now: float,
        lease_s: float,
        slot: Slot | None = None,
        dependency: DependencyTake | None = None,
    ) -> tuple[Lease, Operation] | None:
        """One write for what an attempt needs before it runs: the site's lease (fence + 1, while the site is as
        `site` was read: its fence unchanged and its lease free for `op`) and the attempt (as start_attempt, taking
        a new `slot`; without one, the row must hold the slot it held as `op` was read, or none). LimitReached when
        the slot alone is full (nothing written). None, writing nothing, when the site or the row is not as read
        (another claim meanwhile, not runnable): the caller then claims and starts in two steps, which tell those
        apart. When `op` was read `continuing`, the attempt is continued instead (start_attempt's `continues_from`,
        under op.fence). `dependency`: what the start takes of its site's dependencies, in the same transaction (a
        capped shard full: LimitReached naming it; a breaker set or a bucket moved: DependencyRefused); the row
        records the slots, and every end releases them with its running slot."""

    def reserve_rates(self, op: Operation, rates: Sequence[RateTake], at: float, now: float) -> bool:
        """Take the start's places in its rate buckets ahead of time, at `at`, and record them on the row (with
        not_before = `at`) while the row is as read (its epoch and attempt); False, writing nothing, when a bucket
        moved or the row changed."""

    def schedule_retry(self, op: Operation, fence: int, error: ErrorInfo, not_before: float, now: float) -> None:
        """running -> queued, only while `fence` is still the operation's fence (else StaleFence), releasing the
        running slot the row holds (`op.running_slot`, as read)."""

    def mark_dead(
        self,
        op: Operation,
        fence: int | None,
        error: ErrorInfo,
        now: float,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        """-> dead with the error and its `evidence`, only from a runnable status (and, given a fence, only while
        it is ours); releases what the row holds (as `op` read it) and writes the operation's terminal event, in the
        same transaction (else NotRunnable)."""

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
        """-> cancelled or superseded from one of `from_statuses` (else NotRunnable), releasing what the row holds
        (as `op` read it: a row that moved meanwhile, released from its wait say, is NotRunnable: look again), and
        writes the operation's terminal event, in the same transaction."""

    def revive(
        self,
        op: Operation,
        now: float,
        limits: Sequence[Slot],
        new_input: tuple[str, str] | None = None,
        share: Placement | None = None,
    ) -> Operation:
        """dead at `op.epoch` -> accepted at epoch + 1 with a fresh attempt count (and `new_input` = (key, digest) if
        given), holding `limits` again (re-admitted under them in the same transaction), and placed in `share` as
        `create` does. NotRunnable if it is not dead at that epoch (a second redrive), LimitReached if a counter is
        full, ShareMoved if the placement's condition failed; none of them writes anything."""

    def save_checkpoint(
        self, operation_id: str, fence: int, checkpoint: dict[str, Any], now: float, continues: bool = False
    ) -> None:
        """Record a long operation's last completed step, only while it runs under `fence` (else StaleFence: a
        holder paused past its lease cannot overwrite the checkpoint of the attempt that took over). `continues`:
        its invocation stops here and the next delivery continues the attempt (the row is flagged `continuing`)."""

    def request_cancel(self, operation_id: str, reason: str, now: float) -> None:
        """Ask a running operation to stop: its commit is refused from now on. NotRunnable if terminal."""

    def list(self, *, site_id: str | None = None, status: Status | None = None, limit: int = 100) -> list[Operation]:
        """Newest first: a site's by creation, a status's by last update, all by creation. A site's and a status's
        are index reads, eventually consistent on AWS: whatever the core does on what one shows is re-checked by a
        conditional write on the row itself."""

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
        """Up to `limit` operations `accept` takes, reading at most `reads` rows from `cursor` on: a site's newest
        first by creation (the by-site index), a status's newest first by last update (by-status), all of them in
        the table's order (a scan). A page may be short with a cursor: the next read goes on from there."""

    def oldest(self, status: Status, groups: Mapping[str, Collection[Kind]], reads: int = 500) -> dict[str, Operation]:
        """Per group of kinds (a lane's), its operation longest in `status` (by its last update: when it entered the
        status), reading the status's rows from the oldest until each group has one or about `reads` rows were
        read (DynamoDB filters the kinds: only matches are returned). A group none was found for is absent."""

    def dead_ids_of_class(self, code: str, reads: int = 10_000) -> Sequence[str]:
        """The ids of the dead operations of class `code` as its index has them (eventually consistent on AWS: one
        revived in the last second may still be listed), oldest death first, without reading a row."""

    def dead_of_class(self, code: str, reads: int = 10_000) -> Sequence[Operation]:
        """The dead operations whose error class is `code` (at most `reads`), as they are now: found by their own
        index (not by reading every dead operation), then read consistently; one revived since is left out."""


class SiteStore(Protocol):
    def get(self, site_id: str) -> Site | None: ...

    def get_many(self, site_ids: Sequence[str]) -> dict[str, Site]:
        """The sites named that exist, consistently, in one round trip per 100."""

    def register(self, site_id: str, principal: str, now: float, connection: SiteConnection | None = None) -> Site:
        """Create the site owned by `principal` if absent (with `connection`, default the reference driver);
        SiteTaken if another principal owns it; Conflict if `connection` differs from the one it was registered
        with."""

    def set_dependencies(self, site_id: str, dependency_ids: tuple[str, ...]) -> Site:
        """What the site shares with other sites (checked ids, its owner's order), for attempts not yet started
        (each start reads the site). NotFound if unknown."""

    def claim_lease(self, site_id: str, operation_id: str, now: float, duration: float) -> Lease:
        """Conditional: free, expired or already ours. Increments the fence. Raises LeaseHeld."""

    def extend_lease(self, lease: Lease, now: float, duration: float) -> Lease:
        """Conditional on the fence being still ours; raises StaleFence."""

    def release_lease(self, lease: Lease) -> bool:
        """Conditional on the fence; False (not an error) when someone else holds it by now."""

    def due(self, now: float, limit: int = 1000) -> list[Site]:
        """Sites whose head has a WordPress event or future post due at or before `now`, earliest first."""

    def promoted_since(self, since: float, limit: int = 1000) -> list[Site]:
        """Sites whose live pointer moved at or after `since` (an index: a promotion of a moment ago may be
        missing until the index catches up)."""

    def page(
        self,
        *,
        accept: Callable[[Site], bool] = lambda site: True,
        cursor: str | None = None,
        limit: int = 100,
        reads: int = 1000,
    ) -> Page[Site]:
        """Up to `limit` sites `accept` takes, reading at most `reads` rows from `cursor` on, in the table's order."""

    def list(self, limit: int = 100) -> list[Site]:
        """Up to `limit` sites, ordered by id."""

    def set_paused(self, site_id: str, paused: bool, reason: str | None, by: str, now: float) -> Site:
        """Pause (deliveries are deferred) or resume (also clears the failure count). NotFound if unknown. A change
        of state writes its event (site.paused or site.resumed, `by` whom) with it; the same state again, none."""

    def record_failure(self, site_id: str, pause_at: int, reason: str, now: float) -> Site:
        """Count a failed attempt; the `pause_at`-th in a row pauses the site with `reason`, writing its event with
        the pause. NotFound if unknown."""

    def hold_until_resumed(self, site_id: str, held: HeldDelivery) -> bool:
        """Keep `held` with the site while it is paused (one per operation: a later receive's replaces it); False,
        keeping nothing, if the site is not paused (a resume came first: the worker makes the message visible
        itself). Resuming, then taking what is held, wakes every delivery a pause deferred, whatever the order."""

    def take_held(self, site_id: str) -> tuple[HeldDelivery, ...]:
        """Remove and return, atomically, the deliveries held for the site's resume."""

    def delete_empty(self, site_id: str) -> bool:
        """In one transaction, delete a site that has nothing (no commit, no lease, nothing queued or running: its
        admission counter at zero) with that counter, which keeps its owner: its id is free again. False, deleting
        nothing, when it is not empty (or not there)."""


@dataclass(frozen=True)
class Tally:
    """One add to a per-minute statistic (flow/minute_counts.py): `count` and `amount` to the item
    `bucket_id` of `minute`."""

    bucket_id: str
    minute: int
    count: int
    amount: int


@dataclass(frozen=True)
class PreparedCommit:
    """Everything the commit transaction writes: the record, the new head, the lease release, the status, and the
    publication it asks for (the outbox row, so a crash after the commit cannot lose the publication)."""

    commit: Commit
    lease: Lease
    expected_version: int
    result: dict[str, Any]
    publication: Publication | None = None
    counters: tuple[str, ...] = ()  # what the operation holds besides its running slot, released by the commit
    avg_operation_s: float | None = None  # the site's updated running average of operation time
    slot: str | None = None  # the running slot the operation holds, released by the commit
    next_due_at: float | None = None  # of the new head: when wp-events should next run WordPress's cron
    tallies: tuple[
        Tally, ...
    ] = ()  # statistics counted with the commit (the principal's pace): no request of their own
    event: Event | None = None  # operation.succeeded, written with the commit


class PublicationStore(Protocol):
    def get(self, site_id: str, seq: int) -> Publication | None: ...

    def get_with_site(self, site_id: str, seq: int) -> tuple[Publication | None, Site | None]:
        """The publication and its site, both current, in one round trip."""

    def plan(self, site_id: str, seq: int, total_chunks: int, now: float) -> Publication:
        """Record the chunk count (conditional: unset or the same). Raises NotFound for an unknown publication."""

    def chunk_done(self, site_id: str, seq: int, chunk: int) -> Publication:
        """Add `chunk` to the done set (idempotent) and return the publication as it is now."""

    def step_failed(self, site_id: str, seq: int, failure: str, retried: bool) -> None:
        """Record why a step did not finish (`failure`, its step first); `retried`: count a step delivered again.
        Nothing happens for an unknown publication."""

    def publish(self, site_id: str, seq: int, revision_id: str, now: float, event: Event) -> bool:
        """In one transaction: the site's live pointer moves to this publication, only forward (its live_seq <
        `seq`), and the publication is recorded published (from pending or planned). False, writing nothing, when
        either is refused: a newer publication is live, or this one is finished (the caller tells them apart).
        `event` (publication.live) is written with the promotion."""

    def finish(self, site_id: str, seq: int, status: PublicationStatus, now: float) -> None:
        """-> published or superseded (from pending or planned only)."""

    def open_before(self, before: float, limit: int = 1000) -> list[Publication]:
        """Publications still pending or planned that were created before `before`, oldest first (an index: one
        finished a moment ago may still be listed)."""

    def list(self, site_id: str, limit: int = 100) -> list[Publication]:
        """Newest sequence first."""


class PublicationQueue(Protocol):
    def send(self, message: PublicationMessage) -> str: ...


class CommitStore(Protocol):
    def commit(self, prepared: PreparedCommit, now: float) -> None:
        """One transaction. AlreadyCommitted if the record exists; StaleFence if the site fence moved;
        NotRunnable if the operation is no longer running under this fence."""

    def get(self, operation_id: str) -> Commit | None: ...

    def history(self, site_id: str, limit: int = 100) -> list[Commit]: ...


class EventQueue(Protocol):
    def send(self, message: EventMessage) -> None:
        """The message that delivers a committed event (grouped by principal, deduplicated by event id)."""


class EventLog(Protocol):
    """Events as their transitions wrote them, and each principal's feed."""

    def get_many(self, event_ids: Sequence[str]) -> list[StoredEvent]:
        """Those of these events that exist (consistently read)."""

    def last_seq(self, principal: str) -> int:
        """The principal's last feed place (0: none yet), consistently read."""

    def append(self, principal: str, events: Sequence[Event], after: int) -> bool:
        """Give `events` the places after `after`, recording them delivered (on the bus), atomically: False if a
        place was taken or an event has one."""

    def undelivered(self, before: float, limit: int = 1000) -> list[EventMessage]:
        """Events written before `before` not yet delivered, oldest first (may lag: a delivered one may show)."""

    def read(self, principal: str, after: int, limit: int) -> list[FeedEntry]:
        """The principal's feed after place `after`, in order; consistent: no place before the last is missing."""


class EventBus(Protocol):
    def put(self, events: Sequence[Event]) -> None:
        """Put events on the bus (at least once: a redelivery puts one again, with the same id)."""


class WebhookStore(Protocol):
    """Each principal's endpoints, and each endpoint's deliveries with their attempts."""

    def create(self, endpoint: Endpoint) -> Endpoint:
        """Add an endpoint (its id is new); returned as stored (its first version)."""

    def get(self, principal: str, endpoint_id: str) -> Endpoint | None:
        """The principal's endpoint, consistently read; None for an id it does not own."""

    def owned(self, principal: str) -> list[Endpoint]:
        """The principal's endpoints, oldest first."""

    def due(self, before: float, limit: int = 1000) -> list[Endpoint]:
        """Enabled endpoints with an attempt due before `before` or a redelivery asked for (a sparse index: one
        just changed may be missing or still listed as it was; the rows returned are read as they are)."""

    def save(self, endpoint: Endpoint, event: Event | None = None) -> Endpoint | None:
        """Write the endpoint if its row is still at `endpoint.version` (then bumped, returned), with `event` in the
        same transaction; None if it changed or is gone meanwhile."""

    def delete(self, principal: str, endpoint_id: str) -> bool:
        """Remove an endpoint and its deliveries' rows; False if it was not there."""

    def record(self, endpoint_id: str, entry: FeedEntry, attempt: Attempt) -> None:
        """Add an attempt to the delivery of `entry` to the endpoint."""

    def deliveries(self, endpoint_id: str, before: int | None, limit: int) -> list[WebhookDelivery]:
        """The endpoint's deliveries, newest place first, before place `before` (None: from the newest)."""


class WebhookSecrets(Protocol):
    """Each endpoint's signing secret (Secrets Manager on AWS), never in a row, a log or an event."""

    def create(self, endpoint_id: str) -> str:
        """A new secret for a new endpoint; returned once."""

    def signing(self, endpoint_id: str, now: float) -> list[str]:
        """The secrets a delivery is signed with now: the current one, and the previous during a rotation."""

    def rotate(self, endpoint_id: str, now: float) -> tuple[str, float]:
        """A new current secret; the previous one still signs until the returned time."""

    def delete(self, endpoint_id: str) -> None: ...


class WebhookSender(Protocol):
    def send(self, url: str, headers: Mapping[str, str], body: bytes) -> AttemptResult:
        """One POST, guarded (destination) and bounded (ATTEMPT_TIMEOUT_S); never raises for what the receiver did."""


class WebhookQueue(Protocol):
    def send(self, message: WebhookMessage) -> None:
        """Wake an endpoint (grouped by endpoint, deduplicated by message.reason)."""


class BlobStore(Protocol):
    def put_if_absent(
        self, key: str, body: bytes | IO[bytes], content_type: str = "application/json", sha256: str | None = None
    ) -> bool:
        """Conditional PUT (If-None-Match: *): True if written, False if the object already existed. Given
        `sha256` (hex), the store refuses a body with another digest and remembers it (`describe`)."""

    def get(self, key: str) -> bytes:
        """Raises NotFound."""

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The object and its ETag, or None if absent."""

    def replace(self, key: str, body: bytes, expected_etag: str | None, content_type: str = "application/json") -> bool:
        """Compare-and-swap PUT: If-Match `expected_etag`, or If-None-Match * when None. False on a lost race."""

    def open(self, key: str, start: int = 0, end: int | None = None) -> IO[bytes]:
        """A readable stream of the object's bytes from `start` up to `end` (exclusive; None: to its end): large
        inputs are never read whole, and a step of a long import reads from where the last one stopped. Raises
        NotFound."""

    def describe(self, key: str) -> StoredObject | None:
        """Size and SHA-256 of an object (S3 verified the digest when the object was written), or None if absent."""


@dataclass(frozen=True)
class StoredObject:
    size: int
    sha256: str | None  # hex; None if the object was written without a checksum


@dataclass(frozen=True)
class SignedUpload:
    url: str
    method: str
    headers: dict[str, str]  # to send exactly: they are what the signature and S3's checksum check cover
    expires_at: float


class UploadSigner(Protocol):
    def presign_put(self, key: str, size: int, sha256: str, content_type: str, expires_s: int) -> SignedUpload:
        """A URL that lets its holder PUT exactly one object at `key`, whose body S3 checks against `sha256`."""


class OperationQueue(Protocol):
    def send(self, message: QueueMessage, dedup_id: str, lane: str) -> str:
        """Send on the lane's queue with MessageGroupId = site id; returns the message id."""

    def send_many(self, messages: Sequence[tuple[QueueMessage, str]], lane: str) -> None:
        """Send (message, dedup id) pairs on the lane's queue, ten to a request, in their order (so one site's
        keep theirs). Raises if any could not be sent (those sent stay sent: sending again is safe)."""

    def dead_letter(self, message: QueueMessage, dedup_id: str, attributes: dict[str, str], lane: str) -> str: ...

    def sweep_dead_letters(
        self, lane: str, remove: Callable[[DeadLetter], bool], max_messages: int = 1000
    ) -> tuple[list[DeadLetter], list[DeadLetter]]:
        """Look at up to `max_messages` of the lane's DLQ; delete those `remove` selects. Returns (removed, kept)."""

    def wake(self, lane: str, receipts: Sequence[str]) -> int:
        """Make the received messages of `receipts` visible now (a paused site's deliveries, at its resume); how many
        were. A receipt no longer valid (its message received again, or deleted) is skipped."""


class QuotaStore(Protocol):
    """An operator's override of a principal's (or one of its tenants') limits: its record, and the maximum it puts
    on each counter it bounds (`bounds`: counter -> maximum, None to take one off), written together. The stores'
    admission and running-slot conditions honour a counter's own maximum before the deployment's."""

    def get(self, principal: str, tenant: str | None = None) -> Quota | None: ...

    def put(self, quota: Quota, bounds: Mapping[str, int | None]) -> None: ...

    def clear(self, principal: str, tenant: str | None, bounds: Sequence[str]) -> bool:
        """Remove the override and the maxima it put on `bounds`; False if there was none."""
        ...

    def key_rates(self, principal: str, tenant: str | None = None) -> KeyRates | None:
        """The rates an operator put on the key's starts (`keyrates#P[#T]`), if any."""

    def put_key_rates(self, rates: KeyRates) -> None:
        """Set them (no rates: none; the delivery reads them with the operation, so a change applies at once)."""


class AuditLog(Protocol):
    def record(self, entry: AuditEntry) -> None: ...

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
        """Entries between `since` and `until`, newest first, matching every filter given."""


@dataclass(frozen=True)
class DeadLetter:
    """A message found in a dead-letter queue, by the attributes the worker gave it."""

    lane: str
    attributes: dict[str, str]
    sent_at: float | None


class Visibility(Protocol):
    """The received message whose visibility the worker controls (defer, backoff, heartbeat)."""

    receipt: str  # this receive's, for whoever wakes the message later (OperationQueue.wake)

    def change(self, seconds: float) -> None: ...


class DependencyStore(Protocol):
    """Dependencies' settings and breakers (domain/dependencies.py), kept beside the flow counters."""

    def read(self, dependency_ids: Sequence[str], kind: Kind, also: Sequence[str] = ()) -> DependencyReading:
        """What a delivery needs to decide a start, consistently, in one round trip: each dependency, the attempts
        running on it and its rate buckets for `kind`, and the buckets `also` named (its fairness key's)."""

    def get(self, dependency_id: str) -> Dependency | None: ...

    def list(self, dependency_ids: Collection[str] | None = None) -> list[Dependency]:
        """The dependencies named (None: every one a site has named or an operator has set), absent ones as
        unset, ordered by id."""

    def running(self, dependency_ids: Sequence[str]) -> dict[str, int]:
        """Attempts running on each (summed over its shards)."""

    def named(self, dependency_ids: Sequence[str], principal: str, site_id: str, now: float) -> None:
        """`principal`'s site `site_id` names these: they are listed, and their events go to its feed."""

    def unnamed(self, dependency_ids: Sequence[str], site_id: str, principal: str | None, now: float) -> None:
        """`site_id` no longer names these; given `principal`, none of its sites does (its feed no longer hears)."""

    def buckets(self, counters: Sequence[str]) -> dict[str, float]:
        """The rate buckets' theoretical arrival times (absent: never used)."""

    def put_settings(
        self, dependency_id: str, max_running: int | None, rates: tuple[Rate, ...], by: str, reason: str, now: float
    ) -> Dependency:
        """Set its cap and rates (an operator's; None and () are unlimited), its breaker as it is."""

    def pause(self, dependency_id: str, reason: str, by: str, now: float) -> Dependency | None:
        """Paused by an operator (from any state), its event written with it; None if already paused."""

    def resume(self, dependency_id: str, by: str, now: float, probe: str | None = None) -> Dependency | None:
        """Closed (from paused, open or half open; given `probe`: only while that operation is its probe), its
        event written with it; None if it was closed already (or `probe` is not its probe)."""

    def hold(self, dependency_id: str, held: HeldDelivery, now: float) -> bool:
        """Keep `held` (a start the dependency defers: its cap full, paused, open) for the end or the resume that
        wakes it: one per operation (a later receive's replaces it), at most HELD_KEPT a lane; False, keeping
        nothing, beyond that (the delivery comes back when its deferral ends)."""

    def take_held(self, dependency_id: str, lane: str, limit: int | None = None) -> tuple[HeldDelivery, ...]:
        """Remove and return the `limit` oldest deliveries kept for `lane` (None: all of them), each only as read
        (one kept again meanwhile, by a later receive, stays)."""

    def elect_probe(self, dependency_id: str, operation_id: str, now: float, probe_timeout_s: float) -> bool:
        """Open past its reopen time (or half open with a probe quiet for `probe_timeout_s`): `operation_id` is
        its one probe now. False if another start was elected first or the state changed."""

    def probe_failed(self, dependency_id: str, operation_id: str, now: float, cooldown_max_s: float) -> bool:
        """Its probe failed: open again with the cooldown doubled (at most `cooldown_max_s`); False if that
        operation is not its probe."""

    def record_failure(
        self, dependency_id: str, failure: dict[str, Any], now: float, *, window_s: float
    ) -> tuple[int, int, tuple[dict[str, Any], ...]]:
        """A failure of the destination on one of its sites (principal, site_id, operation_id, code, at), counted
        in the current window: the window's failures, the distinct sites they came from, and the most recent."""

    def open(
        self, dependency_id: str, reason: str, evidence: tuple[dict[str, Any], ...], now: float, cooldown_s: float
    ) -> Dependency | None:
        """Opened by the breaker (only from closed), its event written with it; None if it was not closed."""
