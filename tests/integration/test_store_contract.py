"""One contract, two implementations: the in-memory fakes and DynamoDB (moto). Every guard is the store's condition."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from sitedispatch.aws.flow import DynamoMinuteBuckets
from sitedispatch.domain.dependencies import BreakerState, DependencyRefused, DependencyTake, KeyRates, Rate, RateTake
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
    StaleFence,
    UnclaimedSite,
)
from sitedispatch.domain.events import (
    AUTOMATIC,
    OPERATOR,
    Event,
    EventMessage,
    EventType,
    FeedEntry,
    operation_ended,
    publication_live,
)
from sitedispatch.domain.model import (
    Commit,
    ErrorInfo,
    HeldDelivery,
    Kind,
    Operation,
    Publication,
    PublicationStatus,
    Quota,
    Site,
    SiteConnection,
    Status,
)
from sitedispatch.domain.ports import (
    AuditLog,
    BlobStore,
    CommitStore,
    CounterReading,
    DependencyStore,
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
    Tally,
    UnsentGroup,
    WebhookQueue,
    WebhookSecrets,
    WebhookStore,
)
from sitedispatch.domain.resources import QUEUES
from sitedispatch.domain.webhooks import Attempt, Disabled, Endpoint, WebhookMessage
from sitedispatch.flow.dependencies import HELD_KEPT, key_rates_keys, rate_key, running_shards
from sitedispatch.flow.minute_counts import Bucket, MinuteBuckets, MinuteCounts
from tests.conftest import Cloud, wait_for
from tests.factories import present
from tests.fakes import MemoryMinuteBuckets, MemoryWorld

NOW = 1_800_000_000.0
ERR = ErrorInfo("TransientError", "transient", "boom", True)


PORTS: dict[str, type] = {
    "operations": OperationStore,
    "sites": SiteStore,
    "commits": CommitStore,
    "publications": PublicationStore,
    "buckets": MinuteBuckets,
    "quotas": QuotaStore,
    "audit": AuditLog,
    "blobs": BlobStore,
    "queue": OperationQueue,
    "publication_queue": PublicationQueue,
    "events": EventLog,
    "event_queue": EventQueue,
    "webhooks": WebhookStore,
    "webhook_secrets": WebhookSecrets,
    "webhook_queue": WebhookQueue,
    "dependencies": DependencyStore,
}
CALLED: dict[str, set[tuple[str, str]]] = {"memory": set(), "dynamodb": set()}  # impl -> (port, method)


class Recorded:
    """A port implementation that notes which of its methods the contract suite called (see the last test)."""

    def __init__(self, target: object, port: str, impl: str) -> None:
        self._target, self._port, self._impl = target, port, impl

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if callable(value) and not name.startswith("_"):
            CALLED[self._impl].add((self._port, name))
        return value


@dataclass
class Stores:
    impl: str
    operations: OperationStore
    sites: SiteStore
    commits: CommitStore
    publications: PublicationStore
    buckets: MinuteBuckets
    quotas: QuotaStore
    audit: AuditLog
    blobs: BlobStore
    queue: OperationQueue
    publication_queue: PublicationQueue
    events: EventLog
    event_queue: EventQueue
    webhooks: WebhookStore
    webhook_secrets: WebhookSecrets
    webhook_queue: WebhookQueue
    dependencies: DependencyStore
    sent: Callable[[str], list[str]]  # the bodies on a queue ("operations", "bulk", "publications"), taken off it


def _recorded(impl: str, **ports: Any) -> dict[str, Any]:
    return {name: Recorded(port, name, impl) for name, port in ports.items()}


@pytest.fixture(params=["memory", "dynamodb"])
def stores(request: pytest.FixtureRequest) -> Stores:
    if request.param == "memory":
        world = MemoryWorld()

        def sent_in_memory(queue: str) -> list[str]:
            if queue == "publications":
                bodies = [m.to_body() for m in world.publication_queue.sent]
                world.publication_queue.sent.clear()
                return bodies
            if queue == "events":
                bodies = [m.to_body() for m in world.db.announced]
                world.db.announced.clear()
                return bodies
            if queue == "webhooks":
                bodies = [m.to_body() for m in world.webhook_queue.sent]
                world.webhook_queue.sent.clear()
                return bodies
            bodies = [m.message.to_body() for m in world.queue.sent if m.lane == queue]
            world.queue.sent = [m for m in world.queue.sent if m.lane != queue]
            return bodies

        return Stores(
            "memory",
            sent=sent_in_memory,
            **_recorded(
                "memory",
                operations=world.operations,
                sites=world.sites,
                commits=world.commits,
                publications=world.publications,
                buckets=MemoryMinuteBuckets(world.db),
                quotas=world.quotas,
                audit=world.audit,
                blobs=world.blobs,
                queue=world.queue,
                publication_queue=world.publication_queue,
                events=world.events,
                event_queue=world.event_queue,
                webhooks=world.webhooks,
                webhook_secrets=world.webhook_secrets,
                webhook_queue=world.webhook_queue,
                dependencies=world.dependency_store,
            ),
        )
    cloud: Cloud = request.getfixturevalue("cloud")
    d = cloud.deps

    def sent_on_sqs(queue: str) -> list[str]:
        url = getattr(d.settings, QUEUES[queue].url_field)
        bodies: list[str] = []
        while messages := d.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=60
        ).get("Messages", []):
            for message in messages:
                bodies.append(message["Body"])
                d.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return bodies

    return Stores(
        "dynamodb",
        sent=sent_on_sqs,
        **_recorded(
            "dynamodb",
            operations=d.operations,
            sites=d.sites,
            commits=d.commits,
            publications=d.publications,
            buckets=DynamoMinuteBuckets(d.models),
            quotas=d.quotas,
            audit=d.audit,
            blobs=d.blobs,
            queue=d.queue,
            publication_queue=d.publication_queue,
            events=d.events,
            event_queue=d.event_queue,
            webhooks=d.webhooks,
            webhook_secrets=d.webhook_secrets,
            webhook_queue=d.webhook_queue,
            dependencies=d.dependency_store,
        ),
    )


def new_op(op_id: str = "op_1", site: str = "acme-blog", budget: int = 3) -> Operation:
    return Operation(
        operation_id=op_id,
        site_id=site,
        principal="p",
        kind=Kind.PROVISION,
        status=Status.QUEUED,
        input_key="inputs/x",
        input_digest="d" * 64,
        idempotency_key="k",
        created_at=NOW,
        updated_at=NOW,
        attempt_budget=budget,
    )


def live(site_id: str, seq: int, revision_id: str, now: float) -> Event:
    """The event a promotion of `site_id`'s publication `seq` writes."""
    return publication_live(
        Site(site_id, "p", NOW), seq, revision_id, f"sites/{site_id}/receipts/{revision_id}.json", now
    )


def promote(stores: Stores, site_id: str, seq: int, revision_id: str, now: float) -> bool:
    return stores.publications.publish(site_id, seq, revision_id, now, live(site_id, seq, revision_id, now))


def prepared(lease: Any, op_id: str = "op_1", version: int = 1) -> PreparedCommit:
    commit = Commit(op_id, lease.site_id, Kind.PROVISION, version, "r" * 64, None, lease.fence, NOW + 1, {"n": 1})
    return PreparedCommit(commit, lease, version - 1, {"version": version})


def both(stores: Stores, op_id: str, site_id: str) -> tuple[Operation | None, Site | None]:
    """The operation and the site, as a delivery reads them."""
    delivery = stores.operations.read_delivery(op_id, site_id)
    return delivery.operation, delivery.site


def running(stores: Stores, op_id: str = "op_1", site: str = "acme-blog") -> Any:
    stores.sites.register(site, "p", NOW)
    stores.operations.create(new_op(op_id, site))
    lease = stores.sites.claim_lease(site, op_id, NOW, 30)
    stores.operations.start_attempt(op_id, lease.fence, NOW)
    return lease


def as_read(stores: Stores, operation_id: str) -> Operation:
    """The operation as a caller reads it before it acts on it."""
    return present(stores.operations.get(operation_id))


def test_create_is_conditional(stores: Stores) -> None:
    stores.operations.create(new_op())
    with pytest.raises(AlreadyExists):
        stores.operations.create(new_op())


def test_the_owner_on_a_sites_counter_is_checked_claimed_once_and_names_the_site(stores: Stores) -> None:
    counter = "site#acme-blog"
    limit = [Slot(counter, 5)]
    with pytest.raises(UnclaimedSite):  # nobody named yet: nothing written
        stores.operations.create(new_op("op_1"), limit, SiteOwner(counter))
    assert stores.operations.get("op_1") is None and stores.operations.counter(counter) == 0
    stores.operations.create(new_op("op_1"), limit, SiteOwner(counter, claim=True))
    stores.operations.create(new_op("op_2"), limit, SiteOwner(counter))  # named: checked, not claimed
    intruder = replace(new_op("op_3"), principal="intruder")
    for claim in (False, True):
        with pytest.raises(Conflict, match="is taken by another principal"):
            stores.operations.create(intruder, limit, SiteOwner(counter, claim=claim))
    assert stores.operations.get("op_3") is None and stores.operations.counter(counter) == 2
    with pytest.raises(AlreadyExists):  # a repeat is named as such before anything else
        stores.operations.create(new_op("op_1"), [Slot(counter, 2)], SiteOwner(counter))


def test_a_sites_counter_names_its_dependency_set_and_moves_to_another_only_while_nothing_is_outstanding(
    stores: Stores,
) -> None:
    counter = "site#acme-blog"
    limit = [Slot(counter, 5)]
    assert stores.operations.relabel_site("acme-blog", "db:a")  # nothing outstanding (no counter yet): named
    with pytest.raises(LabelMoved) as moved:  # believed none: told db:a, nothing written
        stores.operations.create(new_op("op_1"), limit, SiteOwner(counter, claim=True))
    assert moved.value.label == "db:a" and stores.operations.get("op_1") is None
    stores.operations.create(new_op("op_1"), limit, SiteOwner(counter, claim=True, label="db:a"))
    assert not stores.operations.relabel_site("acme-blog", "db:b")  # op_1 outstanding: it stays db:a
    assert stores.operations.relabel_site("acme-blog", "db:a")  # what it names already
    group = [replace(new_op("op_2"), holds=(counter,))]
    assert not stores.operations.create_group(group, [Move(counter, 1, 5, owner=True, label="db:b")])
    assert stores.operations.create_group(group, [Move(counter, 1, 5, owner=True, label="db:a")])
    for operation_id in ("op_1", "op_2"):
        stores.operations.end(
            as_read(stores, operation_id), Status.CANCELLED, NOW, from_statuses=(Status.ACCEPTED, Status.QUEUED)
        )
    assert stores.operations.counter(counter) == 0
    assert stores.operations.relabel_site("acme-blog", "")  # nothing outstanding: it names none now
    stores.operations.create(new_op("op_3"), limit, SiteOwner(counter))


def test_only_an_empty_site_is_deleted_and_with_its_owner_its_id_is_free_again(stores: Stores) -> None:
    counter = "site#acme-blog"
    stores.sites.register("acme-blog", "p", NOW)
    stores.operations.create(new_op("op_1"), [Slot(counter, 5)], SiteOwner(counter, claim=True))
    assert not stores.sites.delete_empty("acme-blog")  # an operation outstanding: kept
    assert present(stores.sites.get("acme-blog")).principal == "p"
    stores.operations.end(as_read(stores, "op_1"), Status.CANCELLED, NOW + 1, from_statuses=(Status.QUEUED,))
    assert stores.operations.counter(counter) == 0
    assert stores.sites.delete_empty("acme-blog")
    assert stores.sites.get("acme-blog") is None and not stores.sites.delete_empty("acme-blog")
    # its id is free: another principal registers it and claims its counter
    assert stores.sites.register("acme-blog", "q", NOW + 2).principal == "q"
    stores.operations.create(replace(new_op("op_2"), principal="q"), [Slot(counter, 5)], SiteOwner(counter, claim=True))
    lease = stores.sites.claim_lease("acme-blog", "op_2", NOW + 3, 30)
    stores.operations.start_attempt("op_2", lease.fence, NOW + 3)
    stores.commits.commit(prepared(lease, "op_2"), NOW + 4)
    assert not stores.sites.delete_empty("acme-blog")  # committed: its history is kept
    assert present(stores.sites.get("acme-blog")).head_version == 1


def test_an_operation_and_its_site_are_read_together(stores: Stores) -> None:
    assert both(stores, "op_1", "acme-blog") == (None, None)
    stores.sites.register("acme-blog", "p", NOW)
    stores.operations.create(new_op())
    op, site = both(stores, "op_1", "acme-blog")
    assert op == stores.operations.get("op_1") and site == stores.sites.get("acme-blog")
    assert both(stores, "op_1", "other-site") == (op, None)
    assert both(stores, "", "x" * 3000) == (None, None)
    assert stores.operations.read_delivery("op_1", "acme-blog", [HOME.counter]).waiting == 0  # no counter yet


GROUP = "queued#operations#p#p"
HOME, OTHER = Slot(f"{GROUP}#0", 2), Slot(f"{GROUP}#1", 2)
SHARDS = [HOME.counter, OTHER.counter]


def take(slot: Slot = HOME, guard: str | None = None) -> Placement:
    return Placement(slot, GROUP, guard=guard)


def wait(slot: Slot = HOME) -> Placement:
    return Placement(slot, GROUP, waits=True)


def test_an_operation_takes_a_place_of_a_shard_or_waits_counted_on_it_and_is_released_oldest_first(
    stores: Stores,
) -> None:
    for n in range(2):
        made = stores.operations.create(replace(new_op(f"op_{n}", f"site-{n}"), created_at=NOW + n), share=take())
        assert (made.share, made.waiting_for) == (HOME.counter, None)
        assert made == stores.operations.get(f"op_{n}")  # the answer is the row as written
    with pytest.raises(ShareMoved):  # full: no place, nothing written
        stores.operations.create(new_op("op_2", "site-2"), share=take())
    assert stores.operations.get("op_2") is None
    for n in range(2, 5):  # three wait, counted on the shard, in the order they came
        made = stores.operations.create(replace(new_op(f"op_{n}", f"site-{n}"), created_at=NOW + n), share=wait())
        assert (made.share, made.waiting_for, made.waiting_at) == (None, GROUP, HOME.counter)
    assert stores.operations.counter(HOME.counter) == 2
    assert stores.operations.read_delivery("op_0", "site-0", SHARDS).waiting == 3
    assert stores.operations.release_waiting(GROUP, HOME, NOW + 10, limit=5) == []  # no room: nothing moves

    # op_0 ends (its place frees): the oldest waiting one takes it, and only one fits
    stores.operations.end(as_read(stores, "op_0"), Status.CANCELLED, NOW + 11, from_statuses=(Status.QUEUED,))
    released = stores.operations.release_waiting(GROUP, HOME, NOW + 12, limit=5)
    assert [op.operation_id for op in released] == ["op_2"]
    assert released[0] == stores.operations.get("op_2") and released[0].share == HOME.counter
    assert (released[0].waiting_for, released[0].waiting_at) == (None, None)
    assert stores.operations.counter(HOME.counter) == 2
    assert stores.operations.read_delivery("op_2", "site-2", SHARDS).waiting == 2

    # a place on another shard goes to the oldest waiting too, moving it there (its wait leaves the home shard)
    assert [op.operation_id for op in stores.operations.release_waiting(GROUP, OTHER, NOW + 13)] == ["op_3"]
    assert (as_read(stores, "op_3").share, stores.operations.counter(OTHER.counter)) == (OTHER.counter, 1)
    assert stores.operations.read_counters(SHARDS)[HOME.counter].waiting == 1

    # while others wait on a shard, a new operation waits behind them even when a place there is free
    stores.operations.end(as_read(stores, "op_1"), Status.CANCELLED, NOW + 14, from_statuses=(Status.QUEUED,))
    with pytest.raises(ShareMoved):
        stores.operations.create(replace(new_op("op_9", "site-9"), created_at=NOW + 15), share=take())
    # and a place elsewhere is refused while its home shard has someone waiting (its site's order)
    with pytest.raises(ShareMoved):
        stores.operations.create(new_op("op_9", "site-9"), share=take(OTHER, guard=HOME.counter))
    later = stores.operations.create(replace(new_op("op_9", "site-9"), created_at=NOW + 15), share=wait())
    assert later.waiting_for == GROUP
    # one place is free on the home shard (op_2 holds the other): the oldest of the two waiting takes it
    assert [op.operation_id for op in stores.operations.release_waiting(GROUP, HOME, NOW + 16, limit=5)] == ["op_4"]


def test_a_held_operation_hands_its_share_place_to_the_oldest_of_another_kind_in_its_sites_order(
    stores: Stores,
) -> None:
    def op(op_id: str, site: str, at: int, kind: Kind = Kind.PROVISION) -> Operation:
        return replace(new_op(op_id, site), created_at=NOW + at, kind=kind)

    for n in (1, 2):  # the two places: held provisions
        stores.operations.create(op(f"op_{n}", f"site-{n}", n), share=take())
    # waiting: a provision, a publish behind a provision of its own site, then a publish of another site
    stores.operations.create(op("op_3", "site-3", 3), share=wait())
    stores.operations.create(op("op_4", "site-4", 4), share=wait())
    stores.operations.create(op("op_5", "site-4", 5, Kind.PUBLISH), share=wait())
    stores.operations.create(op("op_6", "site-6", 6, Kind.PUBLISH), share=wait())
    held = as_read(stores, "op_1")
    handed = stores.operations.hand_over(held, GROUP, NOW + 10, Kind.PROVISION)
    assert handed is not None and handed.operation_id == "op_6"  # op_5 waits behind its site's provision
    assert handed == stores.operations.get("op_6") and handed.share == HOME.counter
    assert (handed.waiting_for, handed.waiting_at) == (None, None)
    assert as_read(stores, "op_1").share is None and as_read(stores, "op_1").updated_at == NOW + 10
    counts = stores.operations.read_counters(SHARDS)
    assert (counts[HOME.counter].value, counts[HOME.counter].waiting) == (2, 3)
    assert stores.operations.hand_over(held, GROUP, NOW + 11, Kind.PROVISION) is None  # as read no longer
    assert stores.operations.hand_over(as_read(stores, "op_2"), GROUP, NOW + 11, Kind.PUBLISH) is not None
    assert as_read(stores, "op_3").share == HOME.counter  # a publish held hands to the oldest provision
    assert stores.operations.hand_over(as_read(stores, "op_6"), GROUP, NOW + 12, Kind.PUBLISH) is not None
    assert as_read(stores, "op_4").share == HOME.counter  # op_5's provision ahead of it is sent now
    # only a publish waits: a held publish hands nothing over, and nothing is written
    assert stores.operations.hand_over(as_read(stores, "op_3"), GROUP, NOW + 13, Kind.PUBLISH) is None
    assert as_read(stores, "op_3").share == HOME.counter and stores.operations.counter(HOME.counter) == 2
    handed = stores.operations.hand_over(as_read(stores, "op_3"), GROUP, NOW + 13, Kind.PROVISION)
    assert handed is not None and handed.operation_id == "op_5"  # its site's provision ahead is sent now
    stores.operations.end(as_read(stores, "op_1"), Status.CANCELLED, NOW + 14, from_statuses=(Status.QUEUED,))
    assert stores.operations.counter(HOME.counter) == 2  # its end freed nothing of the share: it handed it over


def test_a_wait_is_refused_while_the_shard_has_room_and_nobody_waits(stores: Stores) -> None:
    with pytest.raises(ShareMoved):
        stores.operations.create(new_op("op_1", "site-1"), share=wait())
    assert stores.operations.get("op_1") is None and stores.operations.read_counters(SHARDS) == {}
    placed = stores.operations.create(new_op("op_1", "site-1"), share=take(OTHER, guard=HOME.counter))
    assert placed.share == OTHER.counter and stores.operations.counter(HOME.counter) == 0


def test_a_waiting_operation_ends_only_as_waiting_and_leaves_the_wait(stores: Stores) -> None:
    one = Slot(HOME.counter, 1)
    stores.operations.create(new_op("op_1", "site-1"), share=take(one))
    waiting = stores.operations.create(new_op("op_2", "site-2"), share=wait(one))
    assert waiting.waiting_for == GROUP
    with pytest.raises(NotRunnable):  # as if it held a place: refused, it waits
        stores.operations.end(
            replace(waiting, waiting_for=None, waiting_at=None, share=one.counter),
            Status.CANCELLED,
            NOW,
            from_statuses=(Status.QUEUED,),
        )
    stores.operations.end(waiting, Status.CANCELLED, NOW, from_statuses=(Status.QUEUED,))
    ended = as_read(stores, "op_2")
    assert ended.status == Status.CANCELLED and (ended.holds, ended.share, ended.waiting_for) == ((), None, None)
    assert stores.operations.read_delivery("op_1", "site-1", SHARDS).waiting == 0
    assert stores.operations.counter(one.counter) == 1
    holder = as_read(stores, "op_1")
    with pytest.raises(NotRunnable):  # a row that does not wait is refused as waiting
        stores.operations.end(
            replace(holder, share=None, waiting_for=GROUP, waiting_at=one.counter),
            Status.CANCELLED,
            NOW,
            from_statuses=(Status.QUEUED,),
        )
    # nothing waits now: the next one takes a place as soon as there is room
    stores.operations.end(holder, Status.CANCELLED, NOW, from_statuses=(Status.QUEUED,))
    assert stores.operations.create(new_op("op_3", "site-3"), share=take(one)).share == one.counter


def test_a_quota_on_a_shard_moves_its_room(stores: Stores) -> None:
    stores.quotas.put(Quota("p", max_running=2), {HOME.counter: 4})
    for n in range(4):
        assert stores.operations.create(new_op(f"op_{n}", f"site-{n}"), share=take()).share == HOME.counter
    with pytest.raises(ShareMoved):
        stores.operations.create(new_op("op_4", "site-4"), share=take())
    assert stores.operations.read_counters([HOME.counter])[HOME.counter] == CounterReading(4, 4, 0)


def test_a_revived_operation_holds_its_new_places_or_waits(stores: Stores) -> None:
    one = Slot(HOME.counter, 1)
    limit = Slot("principal#p#3", 10)
    stores.operations.create(new_op("op_1", "site-1"), [limit], share=take(one))
    stores.operations.mark_dead(as_read(stores, "op_1"), None, ERR, NOW)
    assert stores.operations.counter(limit.counter) == 0 and as_read(stores, "op_1").holds == ()
    stores.operations.create(new_op("op_2", "site-2"), share=take(one))  # takes the freed place
    other_limit = Slot("principal#p#7", 10)
    revived = stores.operations.revive(as_read(stores, "op_1"), NOW + 1, [other_limit], share=wait(one))
    assert (revived.waiting_for, revived.status, revived.epoch) == (GROUP, Status.ACCEPTED, 1)
    assert revived.holds == (other_limit.counter,) and stores.operations.counter(other_limit.counter) == 1
    assert stores.operations.read_delivery("op_1", "site-1", SHARDS).waiting == 1


def test_dead_operations_are_found_by_their_class_until_revived(stores: Stores) -> None:
    timeout = ErrorInfo("PermanentError", "timeout", "slow", False)
    for n in range(4):
        stores.operations.create(new_op(f"op_{n}", f"site-{n}"))
    stores.operations.mark_dead(as_read(stores, "op_0"), None, timeout, NOW)
    stores.operations.mark_dead(as_read(stores, "op_1"), None, ERR, NOW, {"error_code": "timeout", "key": "e"})
    stores.operations.mark_dead(as_read(stores, "op_2"), None, ERR, NOW)  # its error's code: "transient"
    long_code = "x" * 300  # longer than the index keeps: still matched whole
    stores.operations.mark_dead(as_read(stores, "op_3"), None, replace(ERR, code=long_code), NOW)

    def of_class(code: str) -> list[str]:
        return sorted(op.operation_id for op in stores.operations.dead_of_class(code))

    assert of_class("timeout") == ["op_0", "op_1"] and of_class("transient") == ["op_2"]
    assert of_class(long_code) == ["op_3"] and of_class("x" * 200) == [] and of_class("absent") == []
    ids = stores.operations.dead_ids_of_class  # the index alone
    assert sorted(ids("timeout")) == ["op_0", "op_1"] and ids(long_code) == ["op_3"] and ids("x" * 200) == []
    stores.operations.revive(as_read(stores, "op_0"), NOW + 1, [])
    assert of_class("timeout") == ["op_1"] == list(ids("timeout"))


def test_a_group_of_operations_is_created_with_each_counter_moved_once_or_not_at_all(stores: Stores) -> None:
    site, outstanding, shard = "site#acme-blog", "principal#p#1", f"{GROUP}#0"
    stores.operations.create(new_op("op_0"), [Slot(site, 50)], SiteOwner(site, claim=True))
    ops = [replace(new_op(f"op_{n}"), created_at=NOW + n, holds=(site, outstanding), share=shard) for n in (1, 2, 3)]
    moves = [Move(site, 3, 50, owner=True), Move(outstanding, 3, 125), Move(shard, 3, 5, share=True)]

    assert stores.operations.create_group(ops, moves)

    assert [as_read(stores, f"op_{n}") for n in (1, 2, 3)] == ops  # each row holds what it says
    counts = stores.operations.read_counters([site, outstanding, shard])
    assert [counts[c].value for c in (site, outstanding, shard)] == [4, 3, 3]
    more = [replace(new_op("op_4"), holds=(site, outstanding), share=shard)]
    refusals = {
        "past a maximum": (more, [Move(site, 1, 50, owner=True), Move(shard, 3, 5, share=True)]),
        "an id taken": (ops[:1], [Move(site, 1, 50, owner=True)]),
        "another's site": ([replace(more[0], principal="intruder")], [Move(site, 1, 50, owner=True)]),
    }
    for why, (group, group_moves) in refusals.items():
        assert not stores.operations.create_group(group, group_moves), why
    stores.quotas.put(Quota("p", max_outstanding=100), {outstanding: 7})  # a quota: one by one from now on
    assert not stores.operations.create_group(more, [Move(outstanding, 1, 125)])
    stores.operations.create(new_op("op_5", "site-5"), share=Placement(Slot(f"{GROUP}#2", 0), GROUP, waits=True))
    assert not stores.operations.create_group(more, [Move(f"{GROUP}#2", 1, 5, share=True)])  # someone waits
    assert stores.operations.get("op_4") is None  # nothing of a refused group was written
    assert {c: r.value for c, r in stores.operations.read_counters([site, outstanding, shard]).items()} == {
        c: r.value for c, r in counts.items()
    }
    assert stores.operations.create_group(more, [Move(site, 1, 50, owner=True)])

    # a group's provisions of new sites register and claim them with it, while nobody has
    fresh = [replace(new_op(f"op_n{n}", f"new-{n}"), holds=(f"site#new-{n}",)) for n in (1, 2)]
    claims = [Move(f"site#new-{n}", 1, 50, owner=True, register=f"new-{n}") for n in (1, 2)]
    assert stores.operations.create_group(fresh, claims)
    assert [present(stores.sites.get(f"new-{n}")).principal for n in (1, 2)] == ["p", "p"]
    again = [replace(new_op("op_n3", "new-1"), holds=("site#new-1",))]
    assert not stores.operations.create_group(again, claims[:1])  # claimed already: nothing written
    assert stores.operations.get("op_n3") is None
    stores.sites.register("new-3", "someone-else", NOW)
    taken = [replace(new_op("op_n4", "new-3"), holds=("site#new-3",))]
    assert not stores.operations.create_group(taken, [Move("site#new-3", 1, 50, owner=True, register="new-3")])
    assert present(stores.sites.get("new-3")).principal == "someone-else"


def test_a_created_group_is_recorded_unsent_until_its_messages_are_sent(stores: Stores) -> None:
    """A batch writes its groups' rows queued; the record of each group lets the reconciler send what a crash left
    unsent. Only created groups are recorded; `sent` removes records (twice is no error); the listing is an index
    read (it may lag the write on AWS), each record read from the table."""
    first = [replace(new_op(f"op_u{n}", f"unsent-{n}"), created_at=NOW, status=Status.QUEUED) for n in (1, 2)]
    later = [replace(new_op("op_u3", "unsent-3"), created_at=NOW + 10, status=Status.QUEUED)]
    assert stores.operations.create_group(first, [])
    assert stores.operations.create_group(later, [])
    assert not stores.operations.create_group(first[:1], [])  # an id taken: nothing written, nothing recorded

    groups = wait_for(
        lambda: (found := stores.operations.unsent(created_before=NOW + 20)) and len(found) == 2 and found,
        what="both groups listed unsent",
    )
    assert groups == [UnsentGroup("op_u1", ("op_u1", "op_u2"), NOW), UnsentGroup("op_u3", ("op_u3",), NOW + 10)]
    assert stores.operations.unsent(created_before=NOW + 5) == groups[:1]
    assert [as_read(stores, "op_u1").status, as_read(stores, "op_u3").status] == [Status.QUEUED, Status.QUEUED]
    stores.operations.sent(["op_u1"])
    stores.operations.sent(["op_u1"])
    assert stores.operations.unsent(created_before=NOW + 20) == groups[1:]


@pytest.mark.parametrize("key", ["", "x" * 3000, "op_\x00"])
def test_reading_a_key_that_names_nothing_finds_nothing(stores: Stores, key: str) -> None:
    """Readers take identifiers from users: an empty or oversized key (which DynamoDB refuses to look up) is simply
    not there, never an error (the CLI fuzzer found `ops get ''` ending in a traceback)."""
    assert stores.operations.get(key) is None
    assert stores.sites.get(key) is None
    assert stores.commits.get(key) is None
    assert stores.publications.get(key, 1) is None


def test_site_belongs_to_the_principal_that_registered_it(stores: Stores) -> None:
    stores.sites.register("acme-blog", "p", NOW)
    assert stores.sites.register("acme-blog", "p", NOW + 5).created_at == NOW
    with pytest.raises(Conflict):
        stores.sites.register("acme-blog", "intruder", NOW)


def test_a_site_keeps_the_connection_it_was_registered_with(stores: Stores) -> None:
    wordpress = SiteConnection("wordpress", "https://blog.example", "secretsmanager:sitedispatch/blog")
    site = stores.sites.register("acme-blog", "p", NOW, wordpress)
    assert present(stores.sites.get("acme-blog")).connection == site.connection == wordpress
    assert stores.sites.register("acme-blog", "p", NOW + 5).connection == wordpress  # a submit's register
    with pytest.raises(Conflict):
        stores.sites.register("acme-blog", "p", NOW, SiteConnection())
    assert stores.sites.register("plain-site", "p", NOW).connection == SiteConnection()


def test_lease_claims_are_exclusive_and_fences_increase(stores: Stores) -> None:
    stores.sites.register("acme-blog", "p", NOW)
    first = stores.sites.claim_lease("acme-blog", "op_a", NOW, 30)
    with pytest.raises(LeaseHeld) as held:
        stores.sites.claim_lease("acme-blog", "op_b", NOW + 29, 30)
    assert held.value.holder == "op_a" and held.value.expires_at == pytest.approx(NOW + 30)
    again = stores.sites.claim_lease("acme-blog", "op_a", NOW + 1, 30)  # already ours: re-claimed, new fence
    expired = stores.sites.claim_lease("acme-blog", "op_b", NOW + 31.5, 30)
    assert (first.fence, again.fence, expired.fence) == (1, 2, 3)


def test_claiming_an_unregistered_site_is_refused(stores: Stores) -> None:
    with pytest.raises(LeaseHeld):
        stores.sites.claim_lease("ghost-site", "op_a", NOW, 30)


def test_stale_fence_cannot_extend_or_release(stores: Stores) -> None:
    stores.sites.register("acme-blog", "p", NOW)
    old = stores.sites.claim_lease("acme-blog", "op_a", NOW, 10)
    new = stores.sites.claim_lease("acme-blog", "op_b", NOW + 11, 10)
    with pytest.raises(StaleFence):
        stores.sites.extend_lease(old, NOW + 12, 10)
    assert stores.sites.release_lease(old) is False
    assert stores.sites.extend_lease(new, NOW + 12, 10).expires_at == pytest.approx(NOW + 22)
    assert stores.sites.release_lease(new) is True
    assert present(stores.sites.get("acme-blog")).lease_owner is None


def test_attempts_are_spent_conditionally_up_to_the_budget(stores: Stores) -> None:
    stores.operations.create(new_op(budget=2))
    assert stores.operations.start_attempt("op_1", 1, NOW).attempt == 1
    assert stores.operations.start_attempt("op_1", 2, NOW).attempt == 2
    with pytest.raises(NotRunnable):
        stores.operations.start_attempt("op_1", 3, NOW)


def test_commit_writes_record_head_release_and_status_together(stores: Stores) -> None:
    lease = running(stores)
    stores.commits.commit(prepared(lease), NOW + 2)

    site = present(stores.sites.get("acme-blog"))
    op = present(stores.operations.get("op_1"))
    assert site.head_version == 1 and site.head_revision == "r" * 64 and site.lease_owner is None
    assert op.status == Status.SUCCEEDED and op.result == {"version": 1} and op.finished_at == NOW + 2
    assert present(stores.commits.get("op_1")).fence == lease.fence
    assert [c.operation_id for c in stores.commits.history("acme-blog")] == ["op_1"]


def test_a_commit_counts_its_tallies_in_the_same_transaction_and_a_refused_one_counts_nothing(stores: Stores) -> None:
    tally = Tally("completed#operations#p@30000000", 30_000_000, 1, 1500)
    stale = running(stores, "op_2", "other-site")
    stores.sites.claim_lease("other-site", "op_9", NOW + 31, 30)  # op_2's lease taken over: its commit is refused
    with pytest.raises(StaleFence):
        stores.commits.commit(replace(prepared(stale, "op_2"), tallies=(tally,)), NOW + 32)
    assert stores.buckets.read([tally.bucket_id]) == {}

    lease = running(stores)
    stores.commits.commit(replace(prepared(lease), tallies=(tally,)), NOW + 2)
    assert stores.buckets.read([tally.bucket_id]) == {tally.bucket_id: Bucket(30_000_000, 1, 1500)}


def test_a_checkpoint_is_written_only_under_the_running_attempts_fence(stores: Stores) -> None:
    stale = running(stores)
    step = {"offset": 4096, "items": 100, "steps": 1}
    stores.operations.save_checkpoint("op_1", stale.fence, step, NOW + 1)
    assert present(stores.operations.get("op_1")).checkpoint == step
    # the holder pauses past its lease; the next attempt takes over under a newer fence
    lease = stores.sites.claim_lease("acme-blog", "op_1", NOW + 31, 30)
    stores.operations.start_attempt("op_1", lease.fence, NOW + 31)
    with pytest.raises(StaleFence):
        stores.operations.save_checkpoint("op_1", stale.fence, {"offset": 9999, "items": 300, "steps": 3}, NOW + 32)
    assert present(stores.operations.get("op_1")).checkpoint == step  # the last good one stands
    stores.operations.save_checkpoint("op_1", lease.fence, {"offset": 8192, "items": 200, "steps": 2}, NOW + 33)
    stores.operations.mark_dead(as_read(stores, "op_1"), lease.fence, ERR, NOW + 34)
    with pytest.raises(StaleFence):  # not running any more
        stores.operations.save_checkpoint("op_1", lease.fence, step, NOW + 35)
    assert present(stores.operations.get("op_1")).checkpoint == {"offset": 8192, "items": 200, "steps": 2}


def test_a_continuation_moves_the_running_attempt_to_the_next_fence_once_without_spending_an_attempt(
    stores: Stores,
) -> None:
    first = running(stores)
    step = {"offset": 4096, "items": 100, "steps": 1}
    stores.operations.save_checkpoint("op_1", first.fence, step, NOW + 1, continues=True)
    op = present(stores.operations.get("op_1"))
    assert op.continuing and op.continues and op.attempt == 1 and op.checkpoint == step
    site = present(stores.sites.get("acme-blog"))

    taken = stores.operations.claim_and_start(op, site, NOW + 2, 30)  # the next invocation

    assert taken is not None
    lease, continued = taken
    assert lease.fence == first.fence + 1
    row = present(stores.operations.get("op_1"))
    assert (row.attempt, row.fence, row.continuing, row.status) == (1, lease.fence, False, Status.RUNNING)
    assert row.started_at == op.started_at and continued == replace(row, updated_at=continued.updated_at)
    with pytest.raises(StaleFence):  # the invocation that handed over cannot write under its fence any more
        stores.operations.save_checkpoint("op_1", first.fence, step, NOW + 3)
    # once only: a copy read before the continuation was taken continues nothing, in one write or in two
    again = stores.operations.claim_and_start(op, present(stores.sites.get("acme-blog")), NOW + 3, 30)
    assert again is None
    later = stores.sites.claim_lease("acme-blog", "op_1", NOW + 4, 30)
    with pytest.raises(NotRunnable):
        stores.operations.start_attempt("op_1", later.fence, NOW + 4, continues_from=first.fence)
    # a continuation recorded under the current fence is taken by the two-step path too
    stores.operations.save_checkpoint("op_1", lease.fence, step, NOW + 5, continues=True)
    with pytest.raises(NotRunnable):  # under a fence that is not the row's
        stores.operations.start_attempt("op_1", later.fence + 1, NOW + 5, continues_from=first.fence)
    stepped = stores.operations.start_attempt("op_1", later.fence + 1, NOW + 5, continues_from=lease.fence)
    assert (stepped.attempt, stepped.fence, stepped.continuing) == (1, later.fence + 1, False)
    # an attempt started on a row still flagged (a redrive of a dead one, say) is never itself a continuation
    stores.operations.save_checkpoint("op_1", later.fence + 1, step, NOW + 6, continues=True)
    stores.operations.mark_dead(as_read(stores, "op_1"), later.fence + 1, ERR, NOW + 7)
    assert not present(stores.operations.get("op_1")).continues


def test_second_commit_of_an_operation_is_already_committed(stores: Stores) -> None:
    lease = running(stores)
    stores.commits.commit(prepared(lease), NOW + 2)
    with pytest.raises(AlreadyCommitted):
        stores.commits.commit(prepared(lease), NOW + 3)


def test_stale_fence_is_rejected_by_the_commit_transaction_and_nothing_is_written(stores: Stores) -> None:
    stale = running(stores)
    stores.sites.claim_lease("acme-blog", "op_2", NOW + 31, 30)  # the stale holder's lease expired; taken over

    with pytest.raises(StaleFence):
        stores.commits.commit(prepared(stale), NOW + 32)

    assert stores.commits.get("op_1") is None
    site = present(stores.sites.get("acme-blog"))
    assert site.head_version == 0 and site.lease_owner == "op_2"
    assert present(stores.operations.get("op_1")).status == Status.RUNNING


def test_commit_of_an_operation_no_longer_running_is_refused(stores: Stores) -> None:
    lease = running(stores)
    stores.operations.mark_dead(as_read(stores, "op_1"), lease.fence, ERR, NOW + 1)
    with pytest.raises(NotRunnable):
        stores.commits.commit(prepared(lease), NOW + 2)
    assert stores.commits.get("op_1") is None and present(stores.sites.get("acme-blog")).head_version == 0


def test_retry_and_dead_are_fenced(stores: Stores) -> None:
    lease = running(stores)
    with pytest.raises(StaleFence):
        stores.operations.schedule_retry(as_read(stores, "op_1"), lease.fence + 1, ERR, NOW + 5, NOW)
    stores.operations.schedule_retry(as_read(stores, "op_1"), lease.fence, ERR, NOW + 5, NOW)
    op = present(stores.operations.get("op_1"))
    assert op.status == Status.QUEUED and op.not_before == NOW + 5 and op.error == ERR
    with pytest.raises(NotRunnable):
        stores.operations.mark_dead(as_read(stores, "op_1"), lease.fence + 1, ERR, NOW)
    stores.operations.mark_dead(as_read(stores, "op_1"), None, ERR, NOW)
    with pytest.raises(NotRunnable):  # terminal stays terminal
        stores.operations.mark_dead(as_read(stores, "op_1"), None, ERR, NOW)


def test_mark_queued_only_moves_accepted_operations(stores: Stores) -> None:
    from dataclasses import replace

    stores.operations.create(replace(new_op(), status=Status.ACCEPTED))
    assert stores.operations.mark_queued("op_1", NOW) is True
    assert stores.operations.mark_queued("op_1", NOW + 1) is False
    assert as_read(stores, "op_1").queued_at == NOW


def test_an_operation_a_worker_started_before_its_mark_keeps_its_send_time(stores: Stores) -> None:
    """The message can reach a worker before the submitter marks the row queued (a busy machine's fresh-clone CI
    found a succeeded operation without `queued_at`): the mark then leaves the status alone and records the send."""
    from dataclasses import replace

    stores.operations.create(replace(new_op(), status=Status.ACCEPTED))
    stores.operations.start_attempt("op_1", 1, NOW + 1)
    assert stores.operations.mark_queued("op_1", NOW) is False
    row = as_read(stores, "op_1")
    assert (row.status, row.queued_at, row.started_at) == (Status.RUNNING, NOW, NOW + 1)
    assert stores.operations.mark_queued("op_1", NOW + 2) is False
    assert as_read(stores, "op_1").queued_at == NOW
    assert stores.operations.mark_queued("op_none", NOW) is False
    assert stores.operations.get("op_none") is None  # nothing written for an operation that does not exist


def test_listing_by_site_and_status(stores: Stores) -> None:
    from dataclasses import replace

    for i, site in enumerate(["site-a", "site-a", "site-b"]):
        stores.operations.create(replace(new_op(f"op_{i}", site), created_at=NOW + i, updated_at=NOW + i))
    stores.operations.mark_dead(as_read(stores, "op_1"), None, ERR, NOW + 10)
    assert [o.operation_id for o in stores.operations.list(site_id="site-a")] == ["op_1", "op_0"]
    assert [o.operation_id for o in stores.operations.list(status=Status.DEAD)] == ["op_1"]
    assert [o.operation_id for o in stores.operations.list(site_id="site-a", status=Status.QUEUED)] == ["op_0"]
    assert len(stores.operations.list(limit=2)) == 2


def test_publication_fan_in_is_a_set_and_finish_keeps_the_first_word(stores: Stores) -> None:

    publications = stores.publications
    lease = running(stores)
    publication = Publication("acme-blog", 1, "r" * 64, "op_1", PublicationStatus.PENDING, NOW)
    stores.commits.commit(PreparedCommit(prepared(lease).commit, lease, 0, {}, publication), NOW + 1)
    assert publications.get("acme-blog", 1) == publication  # written by the commit transaction (the outbox)
    assert publications.get_with_site("acme-blog", 1) == (publication, stores.sites.get("acme-blog"))
    assert publications.get_with_site("acme-blog", 2) == (None, stores.sites.get("acme-blog"))
    assert publications.get_with_site("other-site", 1) == (None, None)

    with pytest.raises(Conflict):  # no chunk is done before the plan exists
        publications.chunk_done("acme-blog", 1, 0)
    assert publications.plan("acme-blog", 1, 3, NOW).total_chunks == 3
    assert publications.plan("acme-blog", 1, 3, NOW).total_chunks == 3  # the same plan again: fine
    with pytest.raises(Conflict):
        publications.plan("acme-blog", 1, 4, NOW)  # a different plan: refused
    publications.chunk_done("acme-blog", 1, 2)
    publications.chunk_done("acme-blog", 1, 2)
    assert publications.chunk_done("acme-blog", 1, 0).done_chunks == frozenset({0, 2})
    publications.step_failed("acme-blog", 1, "chunk 1: S3 answered 503", retried=False)
    publications.step_failed("acme-blog", 1, "chunk 1: " + "x" * 900, retried=True)
    publications.step_failed("acme-blog", 1, "chunk 2: stopped", retried=True)
    publications.step_failed("acme-blog", 99, "plan: stopped", retried=True)  # no such publication: nothing
    failed = present(publications.get("acme-blog", 1))
    assert (failed.retried_steps, failed.last_failure) == (2, "chunk 2: stopped")
    assert publications.get("acme-blog", 99) is None and failed.done_chunks == frozenset({0, 2})
    publications.step_failed("acme-blog", 1, "chunk 1: " + "x" * 900, retried=False)
    assert len(present(publications.get("acme-blog", 1)).last_failure or "") == 500
    publications.finish("acme-blog", 1, PublicationStatus.PUBLISHED, NOW)
    publications.finish("acme-blog", 1, PublicationStatus.SUPERSEDED, NOW)
    assert present(publications.get("acme-blog", 1)).status == PublicationStatus.PUBLISHED
    assert [p.seq for p in publications.list("acme-blog")] == [1]
    with pytest.raises(NotFound):
        publications.plan("acme-blog", 99, 1, NOW)


def committed(stores: Stores, versions: int) -> None:
    """Commits of acme-blog's versions 1..N, each asking for its publication (pending)."""
    for version in range(1, versions + 1):
        op_id = f"op_{version}"
        lease = running(stores, op_id)
        publication = Publication("acme-blog", version, f"{version}" * 64, op_id, PublicationStatus.PENDING, NOW)
        commit = prepared(lease, op_id, version).commit
        stores.commits.commit(PreparedCommit(commit, lease, version - 1, {}, publication), NOW + version)


def test_publishing_moves_the_pointer_only_forward_and_records_the_publication_with_it(stores: Stores) -> None:
    committed(stores, 3)
    assert promote(stores, "acme-blog", 2, "2" * 64, NOW + 5) is True
    assert present(stores.publications.get("acme-blog", 2)).status == PublicationStatus.PUBLISHED
    assert promote(stores, "acme-blog", 1, "1" * 64, NOW + 6) is False  # behind: nothing written
    assert present(stores.publications.get("acme-blog", 1)).status == PublicationStatus.PENDING
    assert promote(stores, "acme-blog", 2, "2" * 64, NOW + 7) is False  # again: finished already
    site = present(stores.sites.get("acme-blog"))
    assert (site.live_seq, site.live_revision, site.live_at) == (2, "2" * 64, NOW + 5)
    stores.publications.finish("acme-blog", 3, PublicationStatus.SUPERSEDED, NOW + 8)
    assert promote(stores, "acme-blog", 3, "3" * 64, NOW + 9) is False  # finished: the pointer stays
    assert present(stores.sites.get("acme-blog")).live_seq == 2
    assert promote(stores, "ghost-site", 1, "a" * 64, NOW) is False


def test_blob_compare_and_swap(stores: Stores) -> None:
    blobs = stores.blobs
    assert blobs.read_versioned("k.json") is None
    assert blobs.replace("k.json", b"1", None) is True
    assert blobs.replace("k.json", b"2", None) is False  # exists: If-None-Match fails
    stored = blobs.read_versioned("k.json")
    assert stored is not None
    body, etag = stored
    assert body == b"1"
    assert blobs.replace("k.json", b"2", etag) is True
    assert blobs.replace("k.json", b"3", etag) is False  # stale ETag
    assert blobs.get("k.json") == b"2"
    assert blobs.put_if_absent("k.json", b"x") is False and blobs.get("k.json") == b"2"
    with pytest.raises(NotFound):
        blobs.get("missing.json")
    with pytest.raises(NotFound):
        blobs.open("missing.json")
    assert blobs.open("k.json").read() == b"2"
    big = bytes(range(256)) * 4096  # a stream, not bytes: how large inputs and manifests are written
    assert blobs.put_if_absent("big.bin", io.BytesIO(big), "application/octet-stream") is True
    assert blobs.get("big.bin") == big


def test_a_blob_is_read_from_any_offset_and_up_to_any_end(stores: Stores) -> None:
    """A step of a long import reads the file from where the last step stopped."""
    body = bytes(range(256)) * 40
    stores.blobs.put_if_absent("uploads/big.bin", body, "application/octet-stream")
    for start, end in ((0, None), (1000, None), (1000, 2000), (len(body) - 1, None), (500, 500), (0, 1)):
        assert stores.blobs.open("uploads/big.bin", start, end).read() == body[start:end], (start, end)
    with pytest.raises(NotFound):
        stores.blobs.open("uploads/missing.bin", 10)


def test_a_blob_written_with_its_digest_is_described_by_it_and_another_body_is_refused(stores: Stores) -> None:
    import hashlib

    from sitedispatch.domain.errors import InvalidInput

    blobs, body = stores.blobs, b"<rss>an export</rss>"
    digest = hashlib.sha256(body).hexdigest()
    assert blobs.describe("uploads/x.xml") is None
    with pytest.raises(InvalidInput):
        blobs.put_if_absent("uploads/x.xml", b"another body", "application/xml", sha256=digest)
    assert blobs.describe("uploads/x.xml") is None  # nothing stored
    assert blobs.put_if_absent("uploads/x.xml", io.BytesIO(body), "application/xml", sha256=digest) is True
    described = blobs.describe("uploads/x.xml")
    assert described is not None and (described.size, described.sha256) == (len(body), digest)


def test_an_attempt_under_an_older_fence_never_overwrites_a_newer_one(stores: Stores) -> None:
    stores.operations.create(new_op())
    assert stores.operations.start_attempt("op_1", 2, NOW).fence == 2
    with pytest.raises(NotRunnable):
        stores.operations.start_attempt("op_1", 1, NOW)
    assert present(stores.operations.get("op_1")).fence == 2 and present(stores.operations.get("op_1")).attempt == 1


def test_running_slots_are_capped_reused_after_a_crash_and_released_once(stores: Stores) -> None:
    slot = Slot("running#operations#p", 1)
    for n in (1, 2):
        stores.sites.register(f"site-{n}", "p", NOW)
        stores.operations.create(new_op(f"op_{n}", f"site-{n}"))
    first = stores.sites.claim_lease("site-1", "op_1", NOW, 30)
    assert stores.operations.start_attempt("op_1", first.fence, NOW, slot).running_slot == slot.counter

    other = stores.sites.claim_lease("site-2", "op_2", NOW, 30)
    with pytest.raises(LimitReached):
        stores.operations.start_attempt("op_2", other.fence, NOW, slot)
    refused = present(stores.operations.get("op_2"))
    assert refused.status == Status.QUEUED and refused.attempt == 0 and refused.running_slot is None

    # op_1's process died: the next attempt keeps the slot it holds instead of taking a second one
    again = stores.sites.claim_lease("site-1", "op_1", NOW + 60, 30)
    assert stores.operations.start_attempt("op_1", again.fence, NOW + 60, slot).attempt == 2
    assert stores.operations.counter(slot.counter) == 1

    with pytest.raises(StaleFence):  # a release must name the slot the row holds
        stores.operations.schedule_retry(
            replace(as_read(stores, "op_1"), running_slot=None), again.fence, ERR, NOW + 70, NOW + 60
        )
    crashed = as_read(stores, "op_1")  # a worker reads it holding its slot; a recovery then gives the slot back
    stores.operations.schedule_retry(crashed, again.fence, ERR, NOW + 70, NOW + 60)
    assert stores.operations.counter(slot.counter) == 0
    assert present(stores.operations.get("op_1")).running_slot is None
    late = stores.sites.claim_lease("site-1", "op_1", NOW + 71, 30)
    with pytest.raises(NotRunnable):  # keeping the slot as read: the row no longer holds it, so no attempt runs
        stores.operations.start_attempt("op_1", late.fence, NOW + 71, current=crashed)
    assert present(stores.operations.get("op_1")).attempt == 2
    stores.sites.release_lease(late)

    assert stores.operations.start_attempt("op_2", other.fence, NOW + 61, slot).running_slot == slot.counter
    with pytest.raises(NotRunnable):
        stores.operations.mark_dead(
            replace(as_read(stores, "op_2"), running_slot="running#bulk#p"), other.fence, ERR, NOW + 62
        )
    stores.operations.mark_dead(as_read(stores, "op_2"), other.fence, ERR, NOW + 62)
    assert stores.operations.counter(slot.counter) == 0


def test_the_lease_and_the_attempt_are_taken_in_one_write_only_while_site_and_row_are_as_read(stores: Stores) -> None:
    slot = Slot("running#operations#p", 1)
    for site_id in ("site-1", "site-3"):
        stores.sites.register(site_id, "p", NOW)
    for op_id, site_id in (("op_1", "site-1"), ("op_2", "site-1"), ("op_3", "site-3")):
        stores.operations.create(new_op(op_id, site_id))
    op, site = both(stores, "op_1", "site-1")
    assert op is not None and site is not None
    taken = stores.operations.claim_and_start(op, site, NOW, 30, slot)
    assert taken is not None
    lease, started = taken
    assert (lease.site_id, lease.owner, lease.fence, lease.expires_at) == ("site-1", "op_1", site.fence + 1, NOW + 30)
    assert started == stores.operations.get("op_1")  # the answer is the row as written
    assert (started.status, started.attempt, started.fence, started.running_slot) == (
        Status.RUNNING,
        1,
        lease.fence,
        slot.counter,
    )
    held = present(stores.sites.get("site-1"))
    assert (held.fence, held.lease_owner) == (lease.fence, "op_1")
    assert stores.operations.counter(slot.counter) == 1

    # op_2 with the site as it was read before op_1's claim: nothing is written, the caller goes the long way
    other = present(stores.operations.get("op_2"))
    assert stores.operations.claim_and_start(other, site, NOW + 1, 30) is None
    stores.sites.release_lease(lease)
    assert stores.operations.claim_and_start(other, site, NOW + 1, 30) is None  # free again, but its fence moved
    assert present(stores.sites.get("site-1")).fence == lease.fence
    assert present(stores.operations.get("op_2")).attempt == 0

    # op_3 on another site while the principal's one running slot is taken: refused, nothing written
    op3, site3 = both(stores, "op_3", "site-3")
    assert op3 is not None and site3 is not None
    with pytest.raises(LimitReached):
        stores.operations.claim_and_start(op3, site3, NOW + 2, 30, slot)
    assert present(stores.sites.get("site-3")).lease_owner is None and present(stores.sites.get("site-3")).fence == 0
    assert present(stores.operations.get("op_3")).attempt == 0

    # op_1's process died holding the slot: the next attempt keeps it (no slot asked), only while it still holds it
    op, site = both(stores, "op_1", "site-1")
    assert op is not None and site is not None and op.running_slot == slot.counter
    again = stores.operations.claim_and_start(op, site, NOW + 60, 30)
    assert again is not None and again[1].attempt == 2 and again[1].running_slot == slot.counter
    assert stores.operations.counter(slot.counter) == 1
    stores.operations.schedule_retry(as_read(stores, "op_1"), again[0].fence, ERR, NOW + 70, NOW + 61)
    stores.sites.release_lease(again[0])
    _, site = both(stores, "op_1", "site-1")
    assert site is not None
    assert stores.operations.claim_and_start(op, site, NOW + 80, 30) is None  # op as read held a slot; no longer
    assert stores.operations.counter(slot.counter) == 0


def test_a_commit_releases_the_slot_it_names(stores: Stores) -> None:
    slot = Slot("running#operations#p", 5)
    stores.sites.register("acme-blog", "p", NOW)
    stores.operations.create(new_op())
    lease = stores.sites.claim_lease("acme-blog", "op_1", NOW, 30)
    stores.operations.start_attempt("op_1", lease.fence, NOW, slot)

    stores.commits.commit(replace(prepared(lease), slot=slot.counter), NOW + 1)

    assert stores.operations.counter(slot.counter) == 0
    op = present(stores.operations.get("op_1"))
    assert op.status == Status.SUCCEEDED and op.running_slot is None


def test_repair_counter_needs_the_observed_value_and_quiet(stores: Stores) -> None:
    stores.operations.create(new_op(), [Slot("site#acme-blog", 10)])  # the counter moved at NOW
    assert not stores.operations.repair_counter("site#acme-blog", 1, 0, NOW - 1, NOW + 200)  # not quiet
    assert not stores.operations.repair_counter("site#acme-blog", 2, 0, NOW + 100, NOW + 200)  # not what it holds
    assert stores.operations.repair_counter("site#acme-blog", 1, 0, NOW + 100, NOW + 200)
    assert stores.operations.counter("site#acme-blog") == 0
    assert stores.operations.repair_counter("site#never-seen", 0, 3, NOW + 100, NOW + 200)
    assert stores.operations.counter("site#never-seen") == 3


def test_the_recount_sees_the_counters_moved_since_it_found_them_zero_and_quiet(stores: Stores) -> None:
    ops = stores.operations

    def held() -> dict[str, int]:
        return {counter: reading.value for counter, reading in ops.held_counters().items()}

    assert held() == {}
    ops.create(new_op(), [Slot("site#acme-blog", 10), Slot("principal#p#0", 10)])
    assert held() == {"site#acme-blog": 1, "principal#p#0": 1}
    assert not ops.forget_counter("site#acme-blog", NOW + 100)  # not zero: kept
    ops.end(as_read(stores, "op_1"), Status.CANCELLED, NOW + 1, from_statuses=(Status.QUEUED,))
    assert held() == {"site#acme-blog": 0, "principal#p#0": 0}  # zero, still listed until found quiet
    assert not ops.forget_counter("site#acme-blog", NOW)  # moved after NOW: not quiet yet
    assert ops.forget_counter("site#acme-blog", NOW + 100)
    assert held() == {"principal#p#0": 0}
    assert ops.repair_counter("principal#p#0", 0, 0, NOW + 100, NOW + 200)  # repaired to zero: out of the index
    assert held() == {}
    assert ops.repair_counter("site#drifted", 0, 2, NOW + 100, NOW + 200)  # repaired above zero: in it
    assert held() == {"site#drifted": 2} and ops.held_counter_ids() == ["site#drifted"]


def test_promoted_sites_and_open_publications_are_listed_by_their_sparse_indexes(stores: Stores) -> None:

    stores.sites.register("quiet-site", "p", NOW)
    assert stores.sites.promoted_since(NOW - 3600) == [] and stores.publications.open_before(NOW + 3600) == []
    lease = running(stores)
    publication = Publication("acme-blog", 1, "r" * 64, "op_1", PublicationStatus.PENDING, NOW + 1)
    stores.commits.commit(PreparedCommit(prepared(lease).commit, lease, 0, {}, publication), NOW + 1)
    assert stores.publications.open_before(NOW + 1) == []  # created at NOW + 1: not before it
    assert [p.seq for p in stores.publications.open_before(NOW + 2)] == [1]
    stores.publications.plan("acme-blog", 1, 2, NOW + 2)
    assert [p.total_chunks for p in stores.publications.open_before(NOW + 2)] == [2]  # planned: still open
    assert promote(stores, "acme-blog", 1, "r" * 64, NOW + 5)
    assert stores.publications.open_before(NOW + 3600) == []
    [promoted] = stores.sites.promoted_since(NOW + 5)
    assert promoted == stores.sites.get("acme-blog") and promoted.live_seq == 1
    assert stores.sites.promoted_since(NOW + 6) == []


def test_minute_buckets_add_within_their_own_minute(stores: Stores) -> None:
    buckets = stores.buckets
    buckets.add("attempts@13", 13, 1, 0)
    buckets.add("attempts@13", 13, 1, 1)
    assert buckets.read(["attempts@13", "attempts@14"]) == {"attempts@13": Bucket(13, 2, 1)}
    buckets.add("attempts@23", 23, 1, 0)  # a later minute is another bucket: minute 13's counts stay as they were
    assert buckets.read(["attempts@13", "attempts@23"]) == {
        "attempts@13": Bucket(13, 2, 1),
        "attempts@23": Bucket(23, 1, 0),
    }


def test_minute_counts_read_their_window_only(stores: Stores) -> None:
    counts = MinuteCounts(stores.buckets)
    minute = int(NOW // 60)
    counts.add("completed#bulk#p", NOW - 3 * 60, 1, 4000)
    counts.add("completed#bulk#p", NOW - 60, 1, 2000)
    counts.add("completed#bulk#p", NOW, 2, 3000)
    counts.add("completed#bulk#p", NOW - 9 * 60, 7, 7000)  # outside every window below
    assert counts.totals("completed#bulk#p", NOW, 5) == (4, 9000)
    assert counts.totals("completed#bulk#p", NOW, 2) == (3, 5000)
    assert counts.totals("completed#bulk#p", (minute + 1) * 60, 2) == (2, 3000)  # the next minute: nothing in it yet
    assert counts.totals("completed#bulk#p", NOW, 10) == (11, 16000)
    assert counts.totals("completed#bulk#other", NOW, 5) == (0, 0)


def test_a_quota_kept_on_its_counters_overrides_the_deployments_limits_until_cleared(stores: Stores) -> None:
    ops = stores.operations
    outstanding, running_slot = Slot("principal#p#0", 100), Slot("running#operations#p#p#0", 10)
    quota = Quota("p", max_outstanding=1, max_running=1, updated_by="ops", updated_at=NOW, reason="trial")
    stores.quotas.put(quota, {outstanding.counter: 1, running_slot.counter: 1})
    assert stores.quotas.get("p") == quota and stores.quotas.get("p", "customer-1") is None
    ops.create(new_op("op_1", "site-1"), [outstanding])
    with pytest.raises(LimitReached) as full:
        ops.create(new_op("op_2", "site-2"), [outstanding])  # the deployment would allow 100
    assert (full.value.counter, full.value.value, full.value.maximum) == (outstanding.counter, 1, 1)
    ops.create(new_op("op_3", "site-3"), [Slot("principal#q#0", 100)])  # another principal: the deployment's
    stores.sites.register("site-1", "p", NOW)
    stores.sites.register("site-3", "p", NOW)
    lease = stores.sites.claim_lease("site-1", "op_1", NOW, 30)
    ops.start_attempt("op_1", lease.fence, NOW, running_slot)
    lease = stores.sites.claim_lease("site-3", "op_3", NOW, 30)
    with pytest.raises(LimitReached):
        ops.start_attempt("op_3", lease.fence, NOW, running_slot)

    # a tenant's quota is its own record, beside the principal's
    tenant_quota = Quota("p", max_outstanding=3, updated_by="ops", updated_at=NOW, reason="big", tenant="customer-1")
    stores.quotas.put(tenant_quota, {"tenant#p#customer-1#0": 3})
    assert stores.quotas.get("p", "customer-1") == tenant_quota and stores.quotas.get("p") == quota
    assert stores.quotas.clear("p", "customer-1", ["tenant#p#customer-1#0"]) is True
    assert stores.quotas.get("p") == quota

    assert stores.quotas.clear("p", None, [outstanding.counter, running_slot.counter]) is True
    assert stores.quotas.get("p") is None and stores.quotas.clear("p", None, [outstanding.counter]) is False
    ops.create(new_op("op_2", "site-2"), [outstanding])  # the deployment's limit again
    ops.start_attempt("op_3", lease.fence, NOW, running_slot)
    assert ops.counter(outstanding.counter) == 2 and ops.counter(running_slot.counter) == 2
    assert ops.read_counters([outstanding.counter, "principal#p#9"]) == {outstanding.counter: CounterReading(2)}


def test_end_cancels_or_supersedes_from_the_given_statuses_and_releases_what_the_row_holds(stores: Stores) -> None:
    ops = stores.operations
    limits = [Slot("site#acme-blog", 10), Slot("principal#p#0", 10)]
    ops.create(new_op("op_1"), limits)
    ops.create(new_op("op_2"), limits)
    assert as_read(stores, "op_1").holds == ("site#acme-blog", "principal#p#0")
    ops.end(
        as_read(stores, "op_1"),
        Status.SUPERSEDED,
        NOW + 1,
        from_statuses=(Status.ACCEPTED, Status.QUEUED),
        reason="superseded by op_2",
        superseded_by="op_2",
    )
    ended = present(ops.get("op_1"))
    assert (ended.status, ended.superseded_by, ended.finished_at, ended.holds) == (
        Status.SUPERSEDED,
        "op_2",
        NOW + 1,
        (),
    )
    assert present(ended.error).message == "superseded by op_2"
    assert ops.counter("site#acme-blog") == 1 and ops.counter("principal#p#0") == 1
    with pytest.raises(NotRunnable):  # not from a status it may end from
        ops.end(ended, Status.CANCELLED, NOW + 2, from_statuses=(Status.QUEUED,))
    assert ops.counter("site#acme-blog") == 1  # the refusal released nothing
    with pytest.raises(NotRunnable):  # a slot the row does not hold
        ops.end(
            replace(as_read(stores, "op_2"), running_slot="running#operations#p#p#0"),
            Status.CANCELLED,
            NOW + 2,
            from_statuses=(Status.QUEUED,),
        )
    with pytest.raises(NotRunnable):  # another epoch's holds
        ops.end(replace(as_read(stores, "op_2"), epoch=1), Status.CANCELLED, NOW + 2, from_statuses=(Status.QUEUED,))
    ops.end(as_read(stores, "op_2"), Status.CANCELLED, NOW + 2, from_statuses=(Status.QUEUED,), reason="asked")
    assert present(ops.get("op_2")).status == Status.CANCELLED
    assert ops.counters("site#") == {"site#acme-blog": 0}
    assert ops.counters() == {"site#acme-blog": 0, "principal#p#0": 0}


def test_revive_takes_a_dead_operation_at_its_epoch_into_a_new_one_once(stores: Stores) -> None:
    ops = stores.operations
    ops.create(new_op(), [Slot("site#acme-blog", 1)])
    ops.mark_dead(as_read(stores, "op_1"), None, ERR, NOW + 1, evidence={"key": "evidence/x"})
    dead = as_read(stores, "op_1")
    assert dead.evidence == {"key": "evidence/x"} and ops.counter("site#acme-blog") == 0
    ops.create(new_op("op_2"), [Slot("site#acme-blog", 1)])  # the site's one slot is taken meanwhile
    with pytest.raises(LimitReached):
        ops.revive(dead, NOW + 2, [Slot("site#acme-blog", 1)])
    assert present(ops.get("op_1")).status == Status.DEAD  # refused: nothing written
    revived = ops.revive(dead, NOW + 3, [Slot("site#acme-blog", 2)], new_input=("inputs/y", "e" * 64))
    assert (revived.status, revived.epoch, revived.attempt, revived.holds) == (
        Status.ACCEPTED,
        1,
        0,
        ("site#acme-blog",),
    )
    assert (revived.input_key, revived.input_digest, revived.error, revived.evidence) == (
        "inputs/y",
        "e" * 64,
        None,
        None,
    )
    assert ops.counter("site#acme-blog") == 2
    with pytest.raises(NotRunnable):  # a second redrive of the same dead epoch
        ops.revive(dead, NOW + 4, [Slot("site#acme-blog", 5)])
    assert ops.counter("site#acme-blog") == 2


def test_a_cancel_request_refuses_the_running_attempts_commit(stores: Stores) -> None:
    lease = running(stores)
    stores.operations.request_cancel("op_1", "asked", NOW + 1)
    assert present(stores.operations.get("op_1")).cancel_requested == "asked"
    with pytest.raises(NotRunnable):
        stores.commits.commit(prepared(lease), NOW + 2)
    stores.operations.mark_dead(as_read(stores, "op_1"), lease.fence, ERR, NOW + 3)
    with pytest.raises(NotRunnable):  # terminal: nothing left to cancel
        stores.operations.request_cancel("op_1", "again", NOW + 4)


def test_pause_resume_and_consecutive_failures(stores: Stores) -> None:
    sites = stores.sites
    sites.register("acme-blog", "p", NOW)
    assert sites.record_failure("acme-blog", 3, "first", NOW).consecutive_failures == 1
    assert not sites.record_failure("acme-blog", 3, "second", NOW + 1).paused
    third = sites.record_failure("acme-blog", 3, "three in a row", NOW + 2)
    assert (third.paused, third.pause_reason, third.consecutive_failures) == (True, "three in a row", 3)
    assert sites.record_failure("acme-blog", 3, "fourth", NOW + 3).pause_reason == "three in a row"  # paused once
    resumed = sites.set_paused("acme-blog", False, None, "p", NOW + 4)
    assert (resumed.paused, resumed.pause_reason, resumed.consecutive_failures) == (False, None, 0)
    assert not sites.set_paused("acme-blog", False, None, "p", NOW + 5).paused  # no change: no event
    paused = sites.set_paused("acme-blog", True, "maintenance", OPERATOR, NOW + 6)
    assert (paused.paused, paused.pause_reason) == (True, "maintenance")
    assert present(sites.get("acme-blog")).pause_reason == "maintenance"
    with pytest.raises(NotFound):
        sites.set_paused("ghost-site", True, "x", "p", NOW)
    with pytest.raises(NotFound):
        sites.record_failure("ghost-site", 3, "x", NOW)
    # each change of state wrote its event, and announced it
    events = [json.loads(body) for body in stores.sent("events")]
    written = [e.event for e in stores.events.get_many([body["event_id"] for body in events])]
    assert [(e.type, e.detail.get("by"), e.detail.get("reason")) for e in written] == [
        (EventType.SITE_PAUSED, AUTOMATIC, "three in a row"),
        (EventType.SITE_RESUMED, "p", None),
        (EventType.SITE_PAUSED, OPERATOR, "maintenance"),
    ]
    assert {e.principal for e in written} == {"p"} and {e.site_id for e in written} == {"acme-blog"}


def test_a_pause_holds_its_deliveries_and_the_resume_takes_them_once(stores: Stores) -> None:
    sites = stores.sites
    sites.register("held-site", "p", NOW)
    assert not sites.hold_until_resumed("held-site", HeldDelivery("op_0", "operations", "r-0"))  # not paused
    sites.set_paused("held-site", True, "maintenance", OPERATOR, NOW)
    assert sites.hold_until_resumed("held-site", HeldDelivery("op_1", "operations", "r-1"))
    assert sites.hold_until_resumed("held-site", HeldDelivery("op_1", "operations", "r 2"))  # a later receive's
    assert sites.hold_until_resumed("held-site", HeldDelivery("op_2", "bulk", "r-3"))
    assert not sites.hold_until_resumed("ghost-site", HeldDelivery("op_9", "bulk", "r-9"))
    assert sites.get("ghost-site") is None
    sites.set_paused("held-site", False, None, OPERATOR, NOW + 1)
    assert not sites.hold_until_resumed("held-site", HeldDelivery("op_3", "bulk", "r-4"))  # resumed first
    assert sites.take_held("held-site") == (
        HeldDelivery("op_1", "operations", "r 2"),
        HeldDelivery("op_2", "bulk", "r-3"),
    )
    assert sites.take_held("held-site") == () and sites.take_held("ghost-site") == ()
    assert not present(sites.get("held-site")).paused


def test_a_woken_delivery_is_received_again_at_once(stores: Stores, request: pytest.FixtureRequest) -> None:
    from sitedispatch.domain.model import QueueMessage

    if stores.impl == "memory":  # the fake holds no received messages: it records what it was asked to wake
        assert stores.queue.wake("bulk", ["r-1", "r-2"]) == 2
        return
    d = request.getfixturevalue("cloud").deps
    stores.queue.send(QueueMessage("op_1", "site-a"), "op_1-e0", lane="bulk")
    url = d.settings.bulk_queue_url
    [first] = d.sqs.receive_message(QueueUrl=url, VisibilityTimeout=300, WaitTimeSeconds=0)["Messages"]
    assert d.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []  # held invisible
    assert stores.queue.wake("bulk", [first["ReceiptHandle"]]) == 1
    [again] = wait_for(
        lambda: d.sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []),
        timeout_s=5,
        what="the woken message received again",
    )
    assert again["MessageId"] == first["MessageId"]


def test_due_sites_come_from_their_committed_heads_earliest_first(stores: Stores) -> None:
    for n, due_at in enumerate([NOW + 50, NOW + 10, None, NOW + 500]):
        site = f"site-{n}"
        lease = running(stores, f"op_{n}", site)
        stores.commits.commit(replace(prepared(lease, f"op_{n}"), next_due_at=due_at), NOW + 1)
    assert [s.site_id for s in stores.sites.due(NOW + 100)] == ["site-1", "site-0"]
    assert [s.site_id for s in stores.sites.due(NOW + 100, limit=1)] == ["site-1"]
    assert stores.sites.due(NOW) == []
    assert [s.site_id for s in stores.sites.list()] == ["site-0", "site-1", "site-2", "site-3"]
    assert present(stores.sites.get("site-2")).next_due_at is None


def test_history_and_publications_are_newest_first(stores: Stores) -> None:

    lease = running(stores)
    stores.commits.commit(prepared(lease), NOW + 1)
    stores.operations.create(new_op("op_2"))
    lease = stores.sites.claim_lease("acme-blog", "op_2", NOW + 2, 30)
    stores.operations.start_attempt("op_2", lease.fence, NOW + 2)
    second = Publication("acme-blog", 2, "s" * 64, "op_2", PublicationStatus.PENDING, NOW + 3)
    stores.commits.commit(replace(prepared(lease, "op_2", version=2), publication=second), NOW + 3)
    assert [c.version for c in stores.commits.history("acme-blog")] == [2, 1]
    assert [c.version for c in stores.commits.history("acme-blog", limit=1)] == [2]
    assert [p.seq for p in stores.publications.list("acme-blog")] == [2]
    assert stores.commits.history("ghost-site") == []


def _every_page(stores: Stores, limit: int, reads: int, **read: Any) -> list[list[str]]:
    pages, cursor = [], None
    for _ in range(50):
        page = stores.operations.page(cursor=cursor, limit=limit, reads=reads, **read)
        pages.append([op.operation_id for op in page.items])
        cursor = page.cursor
        if cursor is None:
            return pages
    raise AssertionError("the cursor never ended")


def test_pages_of_a_listing_hold_every_match_once_in_order_with_bounded_reads(stores: Stores) -> None:
    ops = stores.operations
    for n in range(7):
        site = "acme-blog" if n % 2 == 0 else "other-site"
        ops.create(replace(new_op(f"op_{n}", site), created_at=NOW + n, updated_at=NOW + n, principal=f"p{n % 3}"))
    by_site = [p for p in _every_page(stores, limit=2, reads=10, site_id="acme-blog") if p]
    assert by_site == [["op_6", "op_4"], ["op_2", "op_0"]]
    by_status = [op for page in _every_page(stores, limit=3, reads=10, status=Status.QUEUED) for op in page]
    assert by_status == ["op_6", "op_5", "op_4", "op_3", "op_2", "op_1", "op_0"]
    # a filter applied to the rows read: a page may be short (or empty) while the cursor goes on; no row is missed
    short = _every_page(stores, limit=10, reads=2, status=Status.QUEUED, accept=lambda op: op.principal == "p0")
    assert [op for page in short for op in page] == ["op_6", "op_3", "op_0"] and len(short) >= 4
    everything = [op for page in _every_page(stores, limit=2, reads=3) for op in page]
    assert sorted(everything) == [f"op_{n}" for n in range(7)] and len(everything) == 7
    # a cursor belongs to its listing
    cursor = ops.page(site_id="acme-blog", limit=1).cursor
    assert cursor is not None
    with pytest.raises(InvalidInput):
        ops.page(status=Status.QUEUED, cursor=cursor)
    with pytest.raises(InvalidInput):
        ops.page(cursor="not-a-cursor")


def test_sites_are_read_many_at_once_those_that_exist(stores: Stores) -> None:
    for n in range(3):
        stores.sites.register(f"many-{n}", "p", NOW)
    stores.sites.set_paused("many-1", True, "migrating", "ops", NOW)
    found = stores.sites.get_many(["many-2", "absent", "many-1", "many-2"])
    assert set(found) == {"many-1", "many-2"} and found["many-1"] == stores.sites.get("many-1")
    assert found["many-1"].paused and stores.sites.get_many([]) == {}


def test_pages_of_sites_hold_every_match_once_with_bounded_reads(stores: Stores) -> None:
    for n in range(5):
        stores.sites.register(f"page-site-{n}", f"p{n % 2}", NOW)
    pages, cursor = [], None
    for _ in range(20):
        page = stores.sites.page(accept=lambda site: site.principal == "p0", cursor=cursor, limit=5, reads=2)
        pages.append([site.site_id for site in page.items])
        cursor = page.cursor
        if cursor is None:
            break
    assert sorted(s for p in pages for s in p) == ["page-site-0", "page-site-2", "page-site-4"] and len(pages) >= 3
    from sitedispatch.domain.paging import encode_cursor

    with pytest.raises(InvalidInput):  # another listing's cursor
        stores.sites.page(cursor=encode_cursor("scan", {"operation_id": {"S": "op_1"}}))


def test_the_oldest_of_each_group_of_kinds_in_a_status_is_read_from_the_oldest_row(stores: Stores) -> None:
    ops = stores.operations
    kinds = (Kind.PROVISION, Kind.PUBLISH, Kind.PROVISION, Kind.IMPORT, Kind.IMPORT)
    for n, kind in enumerate(kinds):
        ops.create(replace(new_op(f"op_{n}"), kind=kind, created_at=NOW + n, updated_at=NOW + 10 - n))

    def oldest(status: Status, **groups: set[Kind]) -> dict[str, str]:
        return {group: op.operation_id for group, op in ops.oldest(status, groups).items()}

    assert oldest(Status.QUEUED, a={Kind.PROVISION}) == {"a": "op_2"}  # by last update, not by creation
    assert oldest(Status.QUEUED, a={Kind.PROVISION, Kind.PUBLISH}, b={Kind.IMPORT}) == {"a": "op_2", "b": "op_4"}
    assert oldest(Status.QUEUED, a={Kind.PUBLISH}, b={Kind.WP_CRON}) == {"a": "op_1"}  # none of b's: absent
    assert oldest(Status.DEAD, a=set(Kind)) == {} and oldest(Status.QUEUED) == {}
    for n in range(12):  # older than all of them, of another kind: the search reads on past its first request
        ops.create(replace(new_op(f"op_cron_{n:02}"), kind=Kind.WP_CRON, updated_at=NOW - 100 + n))
    assert oldest(Status.QUEUED, a={Kind.PUBLISH}, b={Kind.WP_CRON}) == {"a": "op_1", "b": "op_cron_00"}
    assert {g: op.operation_id for g, op in ops.oldest(Status.QUEUED, {"a": {Kind.PUBLISH}}, reads=5).items()} == {}


def test_listing_by_status_is_newest_update_first(stores: Stores) -> None:
    """The by-status index sorts by `updated_at` (what the stale-lease and orphan sweeps read), not by creation."""
    ops = stores.operations
    for n in range(3):
        ops.create(replace(new_op(f"op_{n}"), created_at=NOW + n, updated_at=NOW + n))
    ops.request_cancel("op_0", "touch", NOW + 10)  # op_0, the oldest, is now the most recently updated
    assert [o.operation_id for o in ops.list(status=Status.QUEUED)] == ["op_0", "op_2", "op_1"]
    assert [o.operation_id for o in ops.list(site_id="acme-blog")] == ["op_2", "op_1", "op_0"]


def test_the_audit_log_lists_newest_first_within_its_window_and_filters(stores: Stores) -> None:
    from sitedispatch.domain.model import AuditEntry

    day = 86_400
    entries = [
        AuditEntry(NOW - 2 * day, "ops", "pause", "site-a", "ok", "old", "site-a"),
        AuditEntry(NOW - 10, "ops", "cancel", "op_1", "ok", "why", "site-a", {"from": "queued"}),
        AuditEntry(NOW - 5, "tenant", "cancel", "op_2", "denied", None, "site-b"),
        AuditEntry(NOW, "ops", "redrive", "op_3", "ok", "fixed", "site-a"),
    ]
    for entry in entries:
        stores.audit.record(entry)
    assert stores.audit.list(NOW - 60, NOW + 1) == [entries[3], entries[2], entries[1]]
    assert stores.audit.list(NOW - 3 * day, NOW + 1, limit=2) == [entries[3], entries[2]]
    assert stores.audit.list(NOW - 3 * day, NOW + 1)[-1] == entries[0]  # across days
    assert stores.audit.list(NOW - 60, NOW + 1, actor="ops", action="cancel") == [entries[1]]
    assert stores.audit.list(NOW - 60, NOW + 1, site_id="site-b") == [entries[2]]
    assert stores.audit.list(NOW - 60, NOW + 1, target="op_3") == [entries[3]]
    assert stores.audit.list(NOW + 10, NOW + 20) == []


def _by_site(bodies: list[str]) -> dict[str, list[str]]:
    """Message bodies by their group (the site), each group in the order received."""
    groups: dict[str, list[str]] = {}
    for body in bodies:
        groups.setdefault(json.loads(body)["site_id"], []).append(body)
    return groups


def test_queues_carry_only_identities_and_the_dead_letter_sweep_removes_what_it_selects(stores: Stores) -> None:
    from sitedispatch.domain.model import PublicationMessage, QueueMessage

    stores.queue.send(QueueMessage("op_1", "site-a"), "op_1-e0", lane="operations")
    stores.queue.send(QueueMessage("op_2", "site-b"), "op_2-e0", lane="bulk")
    stores.publication_queue.send(PublicationMessage("site-a", "r" * 64, 1))
    assert stores.sent("operations") == [QueueMessage("op_1", "site-a").to_body()]
    many = [(QueueMessage(f"op_{n}", f"site-{n % 3}", "p", "bulk", "customer-1"), f"op_{n}-e0") for n in range(10, 33)]
    stores.queue.send_many(many, lane="bulk")  # three requests' worth, in order within each site
    bulk = stores.sent("bulk")
    expected = [QueueMessage("op_2", "site-b").to_body(), *(message.to_body() for message, _ in many)]
    # A FIFO queue orders messages within a group (a site), not across groups: SQS and LocalStack hand out one
    # group's messages together.
    assert _by_site(bulk) == _by_site(expected)
    assert '"tenant":"customer-1"' in bulk[-1]
    stores.queue.send_many(many[:3], lane="bulk")  # the same dedup ids again: SQS drops them (fakes record them)
    assert stores.sent("publications") == [PublicationMessage("site-a", "r" * 64, 1).to_body()]

    for n in range(3):
        stores.queue.dead_letter(
            QueueMessage(f"op_{n}", f"site-{n}"),
            f"op_{n}-e0",
            {"operation_id": f"op_{n}", "epoch": "0", "attempt": "3"},
            lane="operations",
        )
    removed, kept = stores.queue.sweep_dead_letters(
        "operations", lambda letter: letter.attributes["operation_id"] != "op_1"
    )
    assert sorted(letter.attributes["operation_id"] for letter in removed) == ["op_0", "op_2"]
    assert [letter.attributes["operation_id"] for letter in kept] == ["op_1"]
    assert kept[0].attributes == {"operation_id": "op_1", "epoch": "0", "attempt": "3"}
    removed, kept = stores.queue.sweep_dead_letters("operations", lambda letter: True)
    assert [letter.attributes["operation_id"] for letter in removed] == ["op_1"] and kept == []
    assert stores.queue.sweep_dead_letters("bulk", lambda letter: True) == ([], [])


def test_every_terminal_transition_writes_its_one_event_and_announces_it(stores: Stores) -> None:
    # Given four operations that end four ways, and a commit
    lease = running(stores, "op_ok", "site-ok")
    stores.commits.commit(replace(prepared(lease, "op_ok"), event=succeeded(as_read(stores, "op_ok"))), NOW + 1)
    lease = running(stores, "op_dead", "site-dead")
    stores.operations.mark_dead(as_read(stores, "op_dead"), lease.fence, ERR, NOW + 2, {"key": "evidence/x.json"})
    stores.sites.register("site-c", "p", NOW)
    stores.operations.create(new_op("op_cancel", "site-c"))
    stores.operations.end(as_read(stores, "op_cancel"), Status.CANCELLED, NOW + 3, from_statuses=(Status.QUEUED,))
    stores.operations.create(new_op("op_old", "site-c"))
    stores.operations.end(
        as_read(stores, "op_old"),
        Status.SUPERSEDED,
        NOW + 4,
        from_statuses=(Status.QUEUED,),
        superseded_by="op_new",
    )
    # a transition refused writes no event
    with pytest.raises(NotRunnable):
        stores.operations.end(as_read(stores, "op_old"), Status.CANCELLED, NOW + 5, from_statuses=(Status.QUEUED,))

    # Then each wrote one event, announced on the events queue (grouped by principal), and none more
    messages = [EventMessage.from_body(body) for body in stores.sent("events")]
    assert len(messages) == 4 and {m.principal for m in messages} == {"p"}
    stored = {s.event.detail["operation_id"]: s for s in stores.events.get_many([m.event_id for m in messages])}
    assert {op: (s.event.type, s.seq, s.on_bus) for op, s in stored.items()} == {
        "op_ok": (EventType.OPERATION_SUCCEEDED, None, False),
        "op_dead": (EventType.OPERATION_DEAD, None, False),
        "op_cancel": (EventType.OPERATION_CANCELLED, None, False),
        "op_old": (EventType.OPERATION_SUPERSEDED, None, False),
    }
    dead = stored["op_dead"].event.wire()
    assert (dead["error_class"], dead["error_code"], dead["evidence_key"]) == (
        "TransientError",
        "transient",
        "evidence/x.json",
    )
    assert "boom" not in json.dumps(dead)  # an error's message may quote an input: never in an event
    assert stored["op_old"].event.detail["superseded_by"] == "op_new"
    assert stored["op_ok"].event.detail["version"] == 1
    # and the same id again, for the same epoch, is refused with its transition (never two events of one)
    assert stored["op_ok"].event.event_id == succeeded(as_read(stores, "op_ok")).event_id


def succeeded(op: Operation) -> Event:
    return operation_ended(op, Status.SUCCEEDED, NOW + 1, revision_id="r" * 64, version=1)


def test_the_feed_gives_places_in_order_once_and_never_twice(stores: Stores) -> None:
    # Given three events written with their transitions, none delivered yet
    for n in range(3):
        stores.sites.register(f"site-{n}", "p", NOW)
        stores.operations.create(new_op(f"op_{n}", f"site-{n}"))
        stores.operations.end(as_read(stores, f"op_{n}"), Status.CANCELLED, NOW + n, from_statuses=(Status.QUEUED,))
    messages = [EventMessage.from_body(body) for body in stores.sent("events")]
    events = [s.event for s in stores.events.get_many([m.event_id for m in messages])]
    events.sort(key=lambda e: e.time)
    wait_for(lambda: len(stores.events.undelivered(before=NOW + 100)) == 3, what="three undelivered (an index)")
    assert [m.event_id for m in stores.events.undelivered(before=NOW + 1)] == [events[0].event_id]

    # When the first two take places 1 and 2
    assert stores.events.last_seq("p") == 0
    assert stores.events.append("p", events[:2], 0) is True
    wait_for(lambda: len(stores.events.undelivered(before=NOW + 100)) == 1, what="one undelivered (an index)")
    # Then a place taken is refused, and an event placed is never placed again
    assert stores.events.append("p", events[2:], 0) is False
    assert stores.events.append("p", events[1:], 2) is False
    assert stores.events.append("p", events[2:], 2) is True
    assert stores.events.last_seq("p") == 3 and stores.events.last_seq("someone-else") == 0
    assert [(entry.seq, entry.event) for entry in stores.events.read("p", 0, 10)] == list(enumerate(events, start=1))
    assert [entry.seq for entry in stores.events.read("p", 1, 1)] == [2]
    assert stores.events.read("p", 3, 10) == [] and stores.events.read("someone-else", 0, 10) == []
    placed = stores.events.get_many([e.event_id for e in events])
    assert [(s.seq, s.on_bus) for s in placed] == [(1, True), (2, True), (3, True)]

    # And placed (on the bus), they leave the undelivered ones
    wait_for(lambda: stores.events.undelivered(before=NOW + 100) == [], what="none undelivered (an index)")
    # an events message (of an id not sent before: SQS drops a second send of one within five minutes, by its
    # deduplication id, as LocalStack does; moto does not once the first is deleted)
    stores.event_queue.send(EventMessage("evt_never_sent", "p"))
    assert stores.sent("events") == [EventMessage("evt_never_sent", "p").to_body()]


def _endpoint(n: int, principal: str = "p", **changes: Any) -> Endpoint:
    return Endpoint(f"whk_{n}", principal, f"https://hooks.example.com/{n}", NOW + n, cursor=0, **changes)


def test_an_endpoint_is_its_principals_and_every_write_checks_its_version(stores: Stores) -> None:
    w = stores.webhooks
    first = w.create(_endpoint(1, types=(EventType.OPERATION_DEAD,), tenant="acme", description="d"))
    w.create(_endpoint(2))
    w.create(_endpoint(3, principal="q"))
    assert first.version == 1 and w.get("p", "whk_1") == first
    assert w.get("q", "whk_1") is None and w.get("p", "whk_404") is None and w.get("p", "") is None
    assert [e.endpoint_id for e in w.owned("p")] == ["whk_1", "whk_2"]

    moved = w.save(replace(first, cursor=7, replay=(2, 5), failures=2, next_attempt_at=NOW + 9, failing_since=NOW))
    assert moved is not None and moved.version == 2 and w.get("p", "whk_1") == moved
    assert w.save(replace(first, cursor=8)) is None  # a stale version: refused, nothing written
    assert w.get("p", "whk_1") == moved

    disabled = replace(moved, disabled=Disabled.GONE, disabled_at=NOW + 10, replay=None)
    event = Event("evt_webhook", EventType.WEBHOOK_DISABLED, "p", None, NOW + 10, detail={"endpoint_id": "whk_1"})
    saved = w.save(disabled, event)
    assert saved is not None and saved.disabled == Disabled.GONE and not saved.enabled
    [stored] = stores.events.get_many(["evt_webhook"])
    assert stored.event == event and json.loads(stores.sent("events")[-1])["event_id"] == "evt_webhook"
    assert w.save(disabled, replace(event, event_id="evt_other")) is None  # stale: neither row nor event
    assert stores.events.get_many(["evt_other"]) == []

    assert w.delete("q", "whk_1") is False and w.delete("p", "whk_1") is True
    assert w.get("p", "whk_1") is None and w.delete("p", "whk_1") is False


def test_an_endpoint_is_due_while_an_attempt_or_a_redelivery_waits(stores: Stores) -> None:
    w = stores.webhooks
    a, b, c = w.create(_endpoint(1)), w.create(_endpoint(2)), w.create(_endpoint(3, principal="q"))

    def due(before: float) -> list[str]:
        return sorted(e.endpoint_id for e in w.due(before))

    assert due(NOW + 1000) == []
    a2 = w.save(replace(a, next_attempt_at=NOW + 50, failures=1, failing_since=NOW))
    b2 = w.save(replace(b, replay=(1, 3)))
    assert w.save(replace(c, next_attempt_at=NOW + 50, disabled=Disabled.GONE)) is not None  # disabled: never due
    assert a2 is not None and b2 is not None
    wait_for(lambda: due(NOW + 100) == ["whk_1", "whk_2"], what="both in the due index")
    assert due(NOW + 10) == ["whk_2"]  # a's attempt is later; a redelivery is due at once
    assert w.save(replace(a2, next_attempt_at=None, failures=0, failing_since=None)) is not None
    assert w.save(replace(b2, replay=None)) is not None
    wait_for(lambda: due(NOW + 100) == [], what="the due index emptied")


def test_a_delivery_keeps_each_attempt_newest_place_first(stores: Stores) -> None:
    w = stores.webhooks
    w.create(_endpoint(1))
    for seq in (1, 2, 3):
        entry = FeedEntry(seq, Event(f"evt_{seq}", EventType.OPERATION_SUCCEEDED, "p", "s", NOW))
        w.record("whk_1", entry, Attempt(NOW, None, 0.5, error="refused"))
        w.record("whk_1", entry, Attempt(NOW + 1, 204, 0.01, response="ok", redelivery=seq == 2))
    found = w.deliveries("whk_1", None, 2)
    assert [d.seq for d in found] == [3, 2] and all(d.delivered for d in found)
    assert [a.status for a in found[1].attempts] == [None, 204] and found[1].attempts[1].redelivery
    assert found[1].attempts[0].error == "refused" and found[1].event_id == "evt_2"
    assert [d.seq for d in w.deliveries("whk_1", 2, 10)] == [1]
    w.delete("p", "whk_1")
    assert w.deliveries("whk_1", None, 10) == []


def test_a_secret_signs_alone_then_beside_its_successor_during_a_rotation(stores: Stores) -> None:
    secrets = stores.webhook_secrets
    first = secrets.create("whk_secret")
    assert first.startswith("whsec_") and secrets.signing("whk_secret", NOW) == [first]
    second, until = secrets.rotate("whk_secret", NOW)
    assert second != first and until == NOW + 24 * 3600
    assert secrets.signing("whk_secret", NOW + 1) == [second, first]
    assert secrets.signing("whk_secret", until + 1) == [second]
    secrets.delete("whk_secret")
    secrets.delete("whk_secret")  # twice: nothing to delete is not an error


def test_a_wake_names_its_endpoint(stores: Stores) -> None:
    stores.webhook_queue.send(WebhookMessage("p", "whk_1", "placed:3"))
    assert [WebhookMessage.from_body(b) for b in stores.sent("webhooks")] == [WebhookMessage("p", "whk_1")]


# -- dependencies (domain/dependencies.py) --------------------------------------------------------------------------


def test_a_sites_dependencies_are_set_on_it_and_a_missing_site_is_not_found(stores: Stores) -> None:
    stores.sites.register("dep-site", "p", NOW)
    assert stores.sites.set_dependencies("dep-site", ("db:a", "php:p")).dependencies == ("db:a", "php:p")
    assert present(stores.sites.get("dep-site")).dependencies == ("db:a", "php:p")
    assert stores.sites.set_dependencies("dep-site", ()).dependencies == ()
    with pytest.raises(NotFound):
        stores.sites.set_dependencies("no-such-site", ("db:a",))


def test_a_dependency_is_named_set_paused_and_resumed_each_change_told_to_its_principals(stores: Stores) -> None:
    deps = stores.dependencies
    deps.named(["db:a"], "alice", "s-1", NOW)
    deps.named(["db:a"], "bob", "s-2", NOW)
    assert [d.dependency_id for d in deps.list(None)] == ["db:a"] and deps.list(["db:z"])[0].sites == frozenset()
    set_ = deps.put_settings("db:a", 2, (Rate(20, 60.0, 5),), "ops", "two", NOW)
    assert (set_.max_running, set_.rates, set_.sites) == (2, (Rate(20, 60.0, 5),), frozenset({"s-1", "s-2"}))
    paused = deps.pause("db:a", "maintenance", "operator", NOW + 1)
    assert paused is not None and paused.state == BreakerState.PAUSED and deps.pause("db:a", "x", "o", NOW) is None
    assert present(deps.resume("db:a", "operator", NOW + 2)).state == BreakerState.CLOSED
    assert deps.resume("db:a", "operator", NOW + 3) is None
    told = [EventMessage.from_body(body) for body in stores.sent("events")]
    assert sorted(m.principal for m in told) == ["alice", "alice", "bob", "bob"]  # paused and resumed, to each
    deps.unnamed(["db:a"], "s-2", "bob", NOW + 4)
    after = present(deps.get("db:a"))
    assert after.sites == {"s-1"} and after.principals == {"alice"}


def test_a_breaker_opens_from_closed_elects_one_probe_and_a_failed_probe_doubles_its_cooldown(stores: Stores) -> None:
    deps = stores.dependencies
    deps.named(["db:b"], "p", "s-1", NOW)
    for i, site in enumerate(["s-1", "s-2"]):
        failure = {"principal": "p", "site_id": site, "operation_id": f"op-{i}", "code": "unreachable", "at": NOW}
        count, sites, recent = deps.record_failure("db:b", failure, NOW + i, window_s=60)
    assert (count, sites, [r["operation_id"] for r in recent]) == (2, 2, ["op-0", "op-1"])
    opened = present(deps.open("db:b", "2 failures", recent, NOW + 2, 30.0))
    assert opened.state == BreakerState.OPEN and opened.reopen_at == NOW + 32 and opened.evidence == recent
    assert deps.open("db:b", "again", recent, NOW + 3, 30.0) is None
    assert not deps.elect_probe("db:b", "op-9", NOW + 10, 60.0)
    assert deps.elect_probe("db:b", "op-9", NOW + 32, 60.0) and not deps.elect_probe("db:b", "op-8", NOW + 33, 60.0)
    assert not deps.probe_failed("db:b", "op-8", NOW + 34, 600.0) and deps.probe_failed("db:b", "op-9", NOW + 34, 600.0)
    assert present(deps.get("db:b")).reopen_at == NOW + 94  # 60 s: doubled
    assert deps.elect_probe("db:b", "op-7", NOW + 94, 60.0)
    assert deps.resume("db:b", "breaker", NOW + 95, probe="op-6") is None
    assert present(deps.resume("db:b", "breaker", NOW + 95, probe="op-7")).state == BreakerState.CLOSED


def test_a_start_takes_its_dependency_slot_and_rate_place_and_a_refused_one_takes_nothing(stores: Stores) -> None:
    deps, ops = stores.dependencies, stores.operations
    deps.put_settings("db:c", 1, (Rate(1, 60.0),), "ops", "one", NOW)
    stores.sites.register("dep-c", "p", NOW)
    site = stores.sites.set_dependencies("dep-c", ("db:c",))
    ops.create(new_op("op_dc", "dep-c"))
    reading = deps.read(["db:c"], Kind.PROVISION)
    assert reading.dependency("db:c").max_running == 1 and reading.running == {"db:c": 0} and reading.tats == {}
    shard = Slot(running_shards("db:c")[0], 1)
    bucket = rate_key("db:c", Rate(1, 60.0))
    take = DependencyTake((shard,), (), (RateTake(bucket, None, NOW + 60),))
    stale = DependencyTake((shard,), (), (RateTake(bucket, NOW + 5, NOW + 65),))
    with pytest.raises(DependencyRefused):
        ops.claim_and_start(as_read(stores, "op_dc"), site, NOW, 30, Slot("running#x#p#p#0", 5), stale)
    assert deps.running(["db:c"]) == {"db:c": 0}  # nothing taken
    started = ops.claim_and_start(as_read(stores, "op_dc"), site, NOW, 30, Slot("running#x#p#p#0", 5), take)
    assert started is not None and started[1].dependency_slots == (shard.counter,)
    assert deps.running(["db:c"]) == {"db:c": 1} and deps.buckets([bucket]) == {bucket: NOW + 60}
    assert deps.read(["db:c"], Kind.PROVISION, [bucket]).tats == {bucket: NOW + 60}


def test_a_dependency_keeps_the_deliveries_it_holds_one_per_operation_and_gives_them_oldest_first(
    stores: Stores,
) -> None:
    deps = stores.dependencies
    assert deps.take_held("db:h", "operations", 1) == () and deps.take_held("db:h", "operations") == ()
    assert deps.hold("db:h", HeldDelivery("op_1", "operations", "r1"), NOW)
    assert deps.hold("db:h", HeldDelivery("op_2", "operations", "r2"), NOW + 1)
    assert deps.hold("db:h", HeldDelivery("op_1", "operations", "r1-again"), NOW + 2)  # a later receive's replaces
    assert deps.hold("db:h", HeldDelivery("op_3", "bulk", "r3"), NOW + 3)  # another lane's, kept apart
    assert deps.take_held("db:h", "operations", 1) == (HeldDelivery("op_2", "operations", "r2"),)
    assert deps.take_held("db:h", "operations") == (HeldDelivery("op_1", "operations", "r1-again"),)
    assert deps.take_held("db:h", "operations", 1) == ()
    assert deps.take_held("db:h", "bulk", 5) == (HeldDelivery("op_3", "bulk", "r3"),)
    for n in range(HELD_KEPT):
        assert deps.hold("db:full", HeldDelivery(f"op_{n:03d}", "operations", f"r{n}"), NOW + n)
    assert not deps.hold("db:full", HeldDelivery("op_late", "operations", "late"), NOW + 100)  # at most HELD_KEPT
    assert deps.hold("db:full", HeldDelivery("op_000", "operations", "again"), NOW + 101)  # one kept is replaced
    assert len(deps.take_held("db:full", "operations")) == HELD_KEPT


def test_a_rate_place_is_reserved_on_the_row_only_from_the_bucket_as_read(stores: Stores) -> None:
    stores.sites.register("dep-r", "p", NOW)
    stores.operations.create(new_op("op_dr", "dep-r"))
    bucket = rate_key("db:r", Rate(1, 60.0))
    op = as_read(stores, "op_dr")
    assert stores.operations.reserve_rates(op, [RateTake(bucket, None, NOW + 120)], NOW + 60, NOW)
    row = as_read(stores, "op_dr")
    assert row.not_before == NOW + 60 and row.rate_reserved == {bucket: NOW + 60}
    assert not stores.operations.reserve_rates(row, [RateTake(bucket, None, NOW + 180)], NOW + 120, NOW)
    assert stores.dependencies.buckets([bucket]) == {bucket: NOW + 120}
    lease = stores.sites.claim_lease("dep-r", "op_dr", NOW, 30)
    started = stores.operations.start_attempt("op_dr", lease.fence, NOW, dependency=DependencyTake())
    assert started.rate_reserved == {}


def test_a_fairness_keys_rates_are_kept_with_its_quotas_and_read_with_a_delivery(stores: Stores) -> None:
    rates = KeyRates("p", "shop-1", (Rate(30, 3600.0, 2, Kind.IMPORT),), "ops", NOW, "imports")
    stores.quotas.put_key_rates(rates)
    assert stores.quotas.key_rates("p", "shop-1") == rates and stores.quotas.key_rates("p") is None
    stores.sites.register("dep-k", "p", NOW)
    stores.operations.create(new_op("op_dk", "dep-k"))
    delivery = stores.operations.read_delivery("op_dk", "dep-k", (), key_rates_keys("p", "shop-1"))
    assert delivery.key_rates == (rates,) and delivery.operation is not None
    stores.quotas.put_key_rates(KeyRates("p", "shop-1", ()))
    assert stores.quotas.key_rates("p", "shop-1") is None


def test_every_port_method_ran_against_both_implementations(request: pytest.FixtureRequest) -> None:
    """The contract covers the ports whole: each method of each port protocol was called on the fakes and on
    DynamoDB/S3/SQS (on moto) by the tests above. Runs last in this module; skipped when only some tests ran."""
    module_tests = [item for item in request.session.items if getattr(item, "module", None) is request.module]
    if len(module_tests) < len([name for name in dir(request.module) if name.startswith("test_")]):
        pytest.skip("only part of the contract suite ran")
    wanted = {
        (port, name)
        for port, protocol in PORTS.items()
        for name in vars(protocol)
        if not name.startswith("_") and callable(getattr(protocol, name))
    }
    for impl, called in CALLED.items():
        assert wanted - called == set(), f"never called on {impl}"
