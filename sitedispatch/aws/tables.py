"""The DynamoDB tables as pynamodb models: the single definition of keys and indexes.

Models are built per deployment by `build_models()` (table names and region come from Settings), so nothing is
bound at import. The local runtime creates tables from these models and the CDK stack reads `table_specs()`.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pynamodb.attributes import (
    BooleanAttribute,
    JSONAttribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    NumberSetAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

DUE_PARTITION = "due"  # sites with something due share one partition of the sparse by-due index

# The reconciler's sparse indexes (what may need repair, never everything that exists): an item is in one while it
# carries the index's key attribute, whose value spreads the index over INDEX_SHARDS partitions (so no one index
# partition takes every write of the fleet) and a sweep queries each shard.
INDEX_SHARDS = 8
LIVE, OPEN, HELD = "live", "open", "held"  # recently promoted sites; unfinished publications; moved counters
UNSENT = "unsent"  # batch groups written queued whose messages are not yet known sent (by-held's other partitions)
UNDELIVERED = "undelivered"  # events not yet in their feed and on the bus (the events table's by-undelivered index)
WEBHOOK_DUE = "due"  # webhook endpoints with an attempt scheduled or a redelivery asked for (by-due)


def index_shard(index: str, key: str) -> str:
    """The sparse index partition an item with this key belongs to."""
    return f"{index}#{zlib.crc32(key.encode()) % INDEX_SHARDS}"


def index_shards(index: str) -> list[str]:
    return [f"{index}#{n}" for n in range(INDEX_SHARDS)]


@dataclass(frozen=True)
class TableNames:
    operations: str
    sites: str
    commits: str
    publications: str
    counters: str
    audit: str
    events: str
    feed: str
    webhooks: str
    deliveries: str


def _index_meta(name: str, keys_only: bool = False) -> Any:
    projection = KeysOnlyProjection() if keys_only else AllProjection()
    return type("Meta", (), {"index_name": name, "projection": projection, "billing_mode": "PAY_PER_REQUEST"})


# The item classes: their attributes and indexes, typed. Each deployment binds them to its own table names by
# subclassing (build_models), so nothing here names a table and nothing is bound at import.
class OperationsBySite(GlobalSecondaryIndex):
    Meta = _index_meta("by-site")
    site_id = UnicodeAttribute(hash_key=True)
    created_at = NumberAttribute(range_key=True)


class OperationsByStatus(GlobalSecondaryIndex):
    Meta = _index_meta("by-status")
    status = UnicodeAttribute(hash_key=True)
    updated_at = NumberAttribute(range_key=True)


class OperationsByWaiting(GlobalSecondaryIndex):
    """Operations waiting for their fairness key's share of a lane's queue, oldest first: what a release sends next.
    Sparse (only waiting rows carry `waiting_for`) and partitioned by the share, so one key's backlog is one
    partition; a waiting row is written twice (created, released), so the full projection saves a read per
    release."""

    Meta = _index_meta("by-waiting")
    waiting_for = UnicodeAttribute(hash_key=True)
    created_at = NumberAttribute(range_key=True)


class OperationsByDeadClass(GlobalSecondaryIndex):
    """Dead operations by error class (`Operation.error_code`), for a redrive or a listing of one class: it reads
    that class's rows, not every dead one. Sparse (the dead transition sets `dead_class`, a revive removes it) and
    keys only: the rows are then read from the table, consistently, so a row revived since is seen as it is."""

    Meta = _index_meta("by-dead-class", keys_only=True)
    dead_class = UnicodeAttribute(hash_key=True)
    updated_at = NumberAttribute(range_key=True)


DEAD_CLASS_CHARS = 200  # an error code up to this long is its own key; a longer one is keyed by its digest


def dead_class_key(code: str) -> str:
    """The class's index key, one per code: `=CODE`, or `#` and the sha256 of a longer code (the two forms cannot
    meet, so the index alone tells a class's operations)."""
    return f"={code}" if len(code) <= DEAD_CLASS_CHARS else f"#{hashlib.sha256(code.encode()).hexdigest()}"


class OperationItem(Model):
    operation_id = UnicodeAttribute(hash_key=True)
    site_id = UnicodeAttribute()
    principal = UnicodeAttribute()
    kind = UnicodeAttribute()
    status = UnicodeAttribute()
    input_key = UnicodeAttribute()
    input_digest = UnicodeAttribute()
    idempotency_key = UnicodeAttribute()
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    attempt = NumberAttribute(default=0)
    attempt_budget = NumberAttribute(default=5)
    epoch = NumberAttribute(default=0)
    fence = NumberAttribute(null=True)
    queued_at = NumberAttribute(null=True)
    started_at = NumberAttribute(null=True)
    finished_at = NumberAttribute(null=True)
    not_before = NumberAttribute(null=True)
    error = JSONAttribute(null=True)
    result = JSONAttribute(null=True)
    cancel_requested = UnicodeAttribute(null=True)
    superseded_by = UnicodeAttribute(null=True)
    running_slot = UnicodeAttribute(null=True)
    evidence = JSONAttribute(null=True)
    inline_input = UnicodeAttribute(null=True)  # a small input's canonical JSON (else it is at input_key in S3)
    waiting_for = UnicodeAttribute(null=True)  # the share (queued#LANE#P#T[#DEPS]) it waits for: by-waiting's key
    waiting_at = UnicodeAttribute(null=True)  # the share's shard that counts its wait
    tenant = UnicodeAttribute(null=True)  # its fairness key, when not the principal
    holds = ListAttribute(of=UnicodeAttribute, null=True)  # the admission counters' shards it holds a place of
    share = UnicodeAttribute(null=True)  # the share's shard it holds a place of
    checkpoint = JSONAttribute(null=True)  # a long import's last completed step (Operation.checkpoint)
    continuing = BooleanAttribute(null=True)  # its next delivery continues the attempt (Operation.continuing)
    dead_class = UnicodeAttribute(null=True)  # while dead: its error class (by-dead-class's key)
    dependency_slots = ListAttribute(of=UnicodeAttribute, null=True)  # its dependencies' running shards it holds
    rate_reserved = JSONAttribute(null=True)  # rate buckets whose place it reserved -> when it may start
    by_site = OperationsBySite()
    by_status = OperationsByStatus()
    by_waiting = OperationsByWaiting()
    by_dead_class = OperationsByDeadClass()


class SitesByDue(GlobalSecondaryIndex):
    Meta = _index_meta("by-due")
    due = UnicodeAttribute(hash_key=True)
    next_due_at = NumberAttribute(range_key=True)


class SitesByLive(GlobalSecondaryIndex):
    """Sites by when they were last promoted: the live-pointer repair reads the recent ones, not every site. Keys
    only: a site's item changes at every claim and commit, and a full projection would rewrite its entry each time
    (the repair reads the sites themselves, consistently)."""

    Meta = _index_meta("by-live", keys_only=True)
    live = UnicodeAttribute(hash_key=True)
    live_at = NumberAttribute(range_key=True)


class SiteItem(Model):
    site_id = UnicodeAttribute(hash_key=True)
    principal = UnicodeAttribute()
    created_at = NumberAttribute()
    head_version = NumberAttribute(default=0)
    head_revision = UnicodeAttribute(null=True)
    fence = NumberAttribute(default=0)
    lease_owner = UnicodeAttribute(null=True)
    lease_expires_at = NumberAttribute(null=True)
    paused = BooleanAttribute(default=False)
    pause_reason = UnicodeAttribute(null=True)
    paused_by = UnicodeAttribute(null=True)
    paused_at = NumberAttribute(null=True)
    consecutive_failures = NumberAttribute(default=0)
    avg_operation_s = NumberAttribute(null=True)
    live_seq = NumberAttribute(default=0)
    live_revision = UnicodeAttribute(null=True)
    live_at = NumberAttribute(null=True)
    next_due_at = NumberAttribute(null=True)
    driver = UnicodeAttribute(null=True)  # absent: the reference driver
    endpoint = UnicodeAttribute(null=True)
    credential_ref = UnicodeAttribute(null=True)
    due = UnicodeAttribute(null=True)  # DUE_PARTITION while next_due_at is set: the sparse by-due index's key
    live = UnicodeAttribute(null=True)  # index_shard(LIVE, site_id) once promoted: the by-live index's key
    held: MapAttribute[str, str] = MapAttribute(
        null=True
    )  # while paused: operation id -> "lane receipt", the deliveries a resume wakes
    dependencies = ListAttribute(of=UnicodeAttribute, null=True)  # what it shares with other sites (Site.dependencies)
    by_due = SitesByDue()
    by_live = SitesByLive()


class CommitsBySite(GlobalSecondaryIndex):
    Meta = _index_meta("by-site")
    site_id = UnicodeAttribute(hash_key=True)
    version = NumberAttribute(range_key=True)


class CommitItem(Model):
    operation_id = UnicodeAttribute(hash_key=True)
    site_id = UnicodeAttribute()
    kind = UnicodeAttribute()
    version = NumberAttribute()
    revision_id = UnicodeAttribute()
    parent_revision = UnicodeAttribute(null=True)
    fence = NumberAttribute()
    committed_at = NumberAttribute()
    summary = JSONAttribute(null=True)
    by_site = CommitsBySite()


class PublicationsByOpen(GlobalSecondaryIndex):
    """Publications not finished yet, oldest first: the lost fan-ins a sweep resumes are among these."""

    Meta = _index_meta("by-open")
    open = UnicodeAttribute(hash_key=True)
    created_at = NumberAttribute(range_key=True)


class PublicationItem(Model):
    site_id = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)
    revision_id = UnicodeAttribute()
    operation_id = UnicodeAttribute()
    status = UnicodeAttribute()
    created_at = NumberAttribute()
    total_chunks = NumberAttribute(null=True)
    done_chunks = NumberSetAttribute(null=True)
    finished_at = NumberAttribute(null=True)
    retried_steps = NumberAttribute(null=True)
    last_failure = UnicodeAttribute(null=True)
    open = UnicodeAttribute(null=True)  # index_shard(OPEN, site_id) until finished: the by-open index's key
    by_open = PublicationsByOpen()


class CountersByHeld(GlobalSecondaryIndex):
    """What a sweep must look at in the counters table: counters moved up since a recount last found them at zero
    and quiet (partitions held#k), and batch groups not yet known sent (unsent#k). Keys only: a counter's value
    changes on every move, and a projected value would rewrite the index entry each time (the sweeps read the
    items from the table, consistently)."""

    Meta = _index_meta("by-held", keys_only=True)
    held = UnicodeAttribute(hash_key=True)
    counter_id = UnicodeAttribute(range_key=True)


class CounterItem(Model):
    counter_id = UnicodeAttribute(hash_key=True)
    value = NumberAttribute(default=0)
    changed_at = NumberAttribute(null=True)  # when an admission counter last moved (repair waits for quiet)
    minute = NumberAttribute(null=True)  # per-minute buckets (flow/minute_counts.py): their minute
    total = NumberAttribute(null=True)  # per-minute buckets: the second quantity (retries, milliseconds)
    maximum = NumberAttribute(null=True)  # an operator's quota on this counter (else the deployment's limit)
    owner = UnicodeAttribute(null=True)  # site#SITE: the principal owning the site (checked in the submit transaction)
    label = UnicodeAttribute(null=True)  # site#SITE: the dependency set its work waits by (absent: none)
    held = UnicodeAttribute(null=True)  # index_shard(HELD, counter_id) from a move up until a recount clears it
    waiting = NumberAttribute(null=True)  # a share's shard (queued#LANE#PRINCIPAL#TENANT#k): waits counted on it
    expires_at = NumberAttribute(null=True)  # per-minute buckets: when DynamoDB's TTL may delete them (epoch s)
    operations = ListAttribute(of=UnicodeAttribute, null=True)  # unsent#GROUP: the group's operations, in order
    by_held = CountersByHeld()
    # quota#PRINCIPAL[#TENANT]: the record of an operator's override of the limits (changed_at: when set)
    max_outstanding = NumberAttribute(null=True)
    max_running = NumberAttribute(null=True)
    updated_by = UnicodeAttribute(null=True)
    reason = UnicodeAttribute(null=True)
    # dep#ID: a dependency's settings (JSON) and its breaker (state, reopen_at, probe, probe_at; evidence as JSON);
    # deprun#ID#k: its running shard, carrying the breaker's flag (blocked, and the one probe let through);
    # deprate#ID#KIND: a rate's bucket (tat); depfail#ID#WINDOW: failures in a window (value, sites, operations)
    spec = JSONAttribute(null=True)
    state = UnicodeAttribute(null=True)
    reopen_at = NumberAttribute(null=True)
    probe = UnicodeAttribute(null=True)
    probe_at = NumberAttribute(null=True)
    evidence = JSONAttribute(null=True)
    principals = UnicodeSetAttribute(null=True)
    sites = UnicodeSetAttribute(null=True)
    blocked = BooleanAttribute(null=True)
    tat = NumberAttribute(null=True)
    deliveries: MapAttribute[str, str] = MapAttribute(
        null=True
    )  # dephold#ID#LANE: operation id -> "held-at receipt", the deliveries a dependency's end or resume wakes


class AuditItem(Model):
    """One operator action. Partitioned by UTC day, sorted by time: `audit list` reads the days it covers."""

    day = UnicodeAttribute(hash_key=True)
    entry_id = UnicodeAttribute(range_key=True)  # "{at:.6f}#{random}": time order, unique
    at = NumberAttribute()
    actor = UnicodeAttribute()
    acting_as = UnicodeAttribute(null=True)
    action = UnicodeAttribute()
    target = UnicodeAttribute()
    site_id = UnicodeAttribute(null=True)
    reason = UnicodeAttribute(null=True)
    outcome = UnicodeAttribute()
    detail = JSONAttribute(null=True)


class EventsByUndelivered(GlobalSecondaryIndex):
    """Events written with their transition but not yet delivered (in the feed and on the bus), oldest first: what
    the reconciler sends again when the message that should have delivered one was lost. Keys only, sparse."""

    Meta = _index_meta("by-undelivered", keys_only=True)
    undelivered = UnicodeAttribute(hash_key=True)
    time = NumberAttribute(range_key=True)


class EventItem(Model):
    """An event, written in the transaction of the transition it reports (the outbox): the record every delivery
    of it is made from."""

    event_id = UnicodeAttribute(hash_key=True)
    principal = UnicodeAttribute()
    type = UnicodeAttribute()
    time = NumberAttribute()
    body = JSONAttribute()  # Event.wire() without its feed place
    seq = NumberAttribute(null=True)  # its place in the principal's feed, once given
    on_bus = BooleanAttribute(null=True)  # put on the event bus (at least once)
    undelivered = UnicodeAttribute(null=True)  # index_shard(UNDELIVERED, event_id) until in the feed and on the bus
    expires_at = NumberAttribute(null=True)  # DynamoDB's TTL: the feed's retention past its time
    by_undelivered = EventsByUndelivered()


class FeedItem(Model):
    """A principal's feed: its events in the order the events worker gave them places (one writer per principal at
    a time, the events queue's message group), read consistently after a cursor."""

    principal = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)
    event_id = UnicodeAttribute()
    type = UnicodeAttribute()
    tenant = UnicodeAttribute(null=True)
    body = JSONAttribute()
    expires_at = NumberAttribute(null=True)


class WebhooksByDue(GlobalSecondaryIndex):
    """Endpoints with an attempt scheduled (by when) or a redelivery asked for (0): what the reconciler wakes when the
    message that should have woken one was lost. Keys only, sparse: a quiet fleet's sweep reads nothing."""

    Meta = _index_meta("by-due", keys_only=True)
    due = UnicodeAttribute(hash_key=True)
    due_at = NumberAttribute(range_key=True)


class WebhookItem(Model):
    """A principal's webhook endpoint (domain.webhooks.Endpoint): where its cursor in the feed is, and whether an
    attempt failed. Never its secret (Secrets Manager)."""

    principal = UnicodeAttribute(hash_key=True)
    endpoint_id = UnicodeAttribute(range_key=True)
    url = UnicodeAttribute()
    created_at = NumberAttribute()
    cursor = NumberAttribute()
    types = ListAttribute(of=UnicodeAttribute, null=True)
    tenant = UnicodeAttribute(null=True)
    description = UnicodeAttribute(null=True)
    disabled = UnicodeAttribute(null=True)
    disabled_at = NumberAttribute(null=True)
    next_attempt_at = NumberAttribute(null=True)
    failing_since = NumberAttribute(null=True)
    failures = NumberAttribute(default=0)
    replay_from = NumberAttribute(null=True)
    replay_to = NumberAttribute(null=True)
    version = NumberAttribute()
    due = UnicodeAttribute(null=True)  # index_shard(WEBHOOK_DUE, endpoint_id) while an attempt or redelivery waits
    due_at = NumberAttribute(null=True)
    by_due = WebhooksByDue()


class DeliveryItem(Model):
    """One event's delivery to one endpoint: its attempts (a retry window holds at most a handful)."""

    endpoint_id = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)
    event_id = UnicodeAttribute()
    type = UnicodeAttribute()
    attempts = ListAttribute(of=UnicodeAttribute)  # each Attempt as JSON, oldest first (appended in place)
    expires_at = NumberAttribute(null=True)  # the feed's retention: a delivery is kept as long as its event


@dataclass(frozen=True)
class Models:
    """The item classes bound to one deployment's tables."""

    Operation: type[OperationItem]
    Site: type[SiteItem]
    Commit: type[CommitItem]
    Publication: type[PublicationItem]
    Counter: type[CounterItem]
    Audit: type[AuditItem]
    Event: type[EventItem]
    Feed: type[FeedItem]
    Webhook: type[WebhookItem]
    Delivery: type[DeliveryItem]

    def all(self) -> tuple[type[Model], ...]:
        return (
            self.Operation,
            self.Site,
            self.Commit,
            self.Publication,
            self.Counter,
            self.Audit,
            self.Event,
            self.Feed,
            self.Webhook,
            self.Delivery,
        )


M = TypeVar("M", bound=Model)


def build_models(names: TableNames, region: str, host: str | None = None, session: Any = None) -> Models:
    """Model classes bound to these table names. `host=None` lets botocore read AWS_ENDPOINT_URL itself."""

    def bound(base: type[M], table: str) -> type[M]:
        meta = type(
            "Meta",
            (),
            {
                "table_name": table,
                "region": region,
                "host": host,
                "billing_mode": "PAY_PER_REQUEST",
                "max_retry_attempts": 3,
            },
        )
        return cast("type[M]", type(base.__name__, (base,), {"Meta": meta, "__module__": __name__}))

    models = Models(
        Operation=bound(OperationItem, names.operations),
        Site=bound(SiteItem, names.sites),
        Commit=bound(CommitItem, names.commits),
        Publication=bound(PublicationItem, names.publications),
        Counter=bound(CounterItem, names.counters),
        Audit=bound(AuditItem, names.audit),
        Event=bound(EventItem, names.events),
        Feed=bound(FeedItem, names.feed),
        Webhook=bound(WebhookItem, names.webhooks),
        Delivery=bound(DeliveryItem, names.deliveries),
    )
    _share_one_connection(models, session)
    return models


def _share_one_connection(models: Models, session: Any) -> None:
    """pynamodb gives each model class its own Connection, hence its own botocore session and DynamoDB client
    (memory and time for each). A Connection serves any number of tables, so all models share the first one.
    Given the process's botocore `session`, that Connection builds its client from it instead of a session of its
    own: the endpoint and partition data the other clients loaded serve it too (bench/coldstart.py measures the
    difference). pynamodb keeps its session per thread;
    this is the building thread's (a client first built from another thread takes a session of its own: slower,
    not wrong). The client itself is one per Connection, whatever thread builds it."""
    table_connections = [model._get_connection() for model in models.all()]
    shared = table_connections[0].connection
    for table_connection in table_connections[1:]:
        shared.add_meta_table(table_connection.connection.get_meta_table(table_connection.table_name))
        table_connection.connection = shared
    if session is not None:
        shared._local.session = session


@dataclass(frozen=True)
class KeySpec:
    name: str
    type: str  # "S" | "N" | "B"


@dataclass(frozen=True)
class IndexSpec:
    name: str
    partition: KeySpec
    sort: KeySpec | None
    projection: str = "ALL"  # DynamoDB's ProjectionType: ALL or KEYS_ONLY


@dataclass(frozen=True)
class TableSpec:
    """What infrastructure needs to know about a table: its keys, global secondary indexes and TTL attribute."""

    logical_id: str
    partition: KeySpec
    sort: KeySpec | None
    indexes: tuple[IndexSpec, ...]
    ttl_attribute: str | None = None


# The per-minute buckets expire, and events past the feed's retention; nothing else does.
TTL_ATTRIBUTES = {"counters": "expires_at", "events": "expires_at", "feed": "expires_at", "deliveries": "expires_at"}

TABLE_LOGICAL_IDS = {
    "operations": "OperationsTable",
    "sites": "SitesTable",
    "commits": "CommitsTable",
    "publications": "PublicationsTable",
    "counters": "CountersTable",
    "audit": "AuditTable",
    "events": "EventsTable",
    "feed": "FeedTable",
    "webhooks": "WebhooksTable",
    "deliveries": "DeliveriesTable",
}


def table_specs() -> dict[str, TableSpec]:
    """Key and index definitions of every table, read off the models (the stack builds tables from these)."""
    models = build_models(TableNames(*TABLE_LOGICAL_IDS), "us-east-1")
    specs = {}
    for role, model in zip(TABLE_LOGICAL_IDS, models.all(), strict=True):
        schema: Any = model._get_schema()
        types = {d["AttributeName"]: d["AttributeType"] for d in schema["attribute_definitions"]}

        def keys(key_schema: list[dict[str, str]], types: dict[str, str] = types) -> tuple[KeySpec, KeySpec | None]:
            hash_key = next(k["AttributeName"] for k in key_schema if k["KeyType"] == "HASH")
            range_key = next((k["AttributeName"] for k in key_schema if k["KeyType"] == "RANGE"), None)
            return KeySpec(hash_key, types[hash_key]), (KeySpec(range_key, types[range_key]) if range_key else None)

        partition, sort = keys(schema["key_schema"])
        indexes = tuple(
            IndexSpec(index["index_name"], *keys(index["key_schema"]), index["projection"]["ProjectionType"])
            for index in schema["global_secondary_indexes"]
        )
        specs[role] = TableSpec(TABLE_LOGICAL_IDS[role], partition, sort, indexes, TTL_ATTRIBUTES.get(role))
    return specs
