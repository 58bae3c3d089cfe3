"""Events over the fakes: the worker places each event once, in order, after putting it on the bus; the feed's
reader follows a cursor, filters without losing its place, waits a bounded time, and confines."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sitedispatch.domain.errors import Forbidden
from sitedispatch.domain.events import Event, EventMessage, EventType, operation_ended, site_paused
from sitedispatch.domain.model import ErrorInfo, Kind, Operation, Site, Status
from sitedispatch.events.feed import MAX_WAIT_S, FeedFilter, FeedReader
from sitedispatch.events.worker import APPEND_RACES, EventsDeps, EventsWorker
from sitedispatch.operator.access import Caller
from tests.fakes import MemoryEventLog, MemoryWorld

NOW = 1_800_000_000.0


def op(n: int, principal: str = "p", tenant: str = "") -> Operation:
    return Operation(
        operation_id=f"op_{n}",
        site_id=f"site-{n}",
        principal=principal,
        kind=Kind.PROVISION,
        status=Status.RUNNING,
        input_key="k",
        input_digest="d",
        idempotency_key="i",
        created_at=NOW,
        updated_at=NOW,
        tenant=tenant,
    )


def written(world: MemoryWorld, *events: Event) -> list[EventMessage]:
    """Events as their transitions write them (the outbox rows and the messages)."""
    with world.db.lock:
        for event in events:
            world.db.write_event(event)
    messages = list(world.db.announced)
    world.db.announced.clear()
    return messages


def worker(world: MemoryWorld) -> EventsWorker:
    return EventsWorker(EventsDeps(world.events, world.event_bus))


def test_an_event_names_ids_and_outcomes_and_reads_back_as_it_was_written() -> None:
    error = ErrorInfo("PermanentError", "invalid_wxr", "line 3: <secret>", False)
    event = operation_ended(op(1, tenant="cust-1"), Status.DEAD, NOW, error=error, evidence_key="evidence/e.json")
    wire = event.wire(7)
    assert Event.from_wire(wire) == event and wire["seq"] == 7 and wire["schema_version"] == 1
    assert (wire["error_class"], wire["error_code"], wire["tenant"]) == ("PermanentError", "invalid_wxr", "cust-1")
    assert "secret" not in str(wire)  # an error's message may quote an input: never in an event
    # one id per epoch, whichever way it ends; a replay (a new epoch) ends with a new one
    assert operation_ended(op(1), Status.SUCCEEDED, NOW + 5).event_id == event.event_id
    replayed = Operation(**{**op(1).__dict__, "epoch": 1})
    assert operation_ended(replayed, Status.DEAD, NOW).event_id != event.event_id


def test_a_batch_is_put_on_the_bus_then_placed_in_order_and_a_duplicate_places_nothing() -> None:
    world = MemoryWorld()
    events = [operation_ended(op(n), Status.SUCCEEDED, NOW + 3 - n) for n in range(3)]  # written newest first
    other = operation_ended(op(9, principal="q"), Status.CANCELLED, NOW)
    messages = written(world, *events, other)

    assert worker(world).process(messages) == 4
    assert [e.event_id for e in world.event_bus.put_events] == [m.event_id for m in messages]
    feed = world.events.read("p", 0, 10)
    assert [entry.event for entry in feed] == sorted(events, key=lambda e: e.time)  # placed by time
    assert [entry.seq for entry in feed] == [1, 2, 3] and [e.seq for e in world.events.read("q", 0, 10)] == [1]
    assert world.events.undelivered(before=NOW + 100) == []

    # a message delivered again: nothing placed twice, nothing put on the bus again
    assert worker(world).process(messages[:2]) == 0
    assert len(world.event_bus.put_events) == 4 and world.events.last_seq("p") == 3


class Raced(MemoryEventLog):
    """Another delivery takes the places first, `times` times."""

    def __init__(self, world: MemoryWorld, times: int) -> None:
        super().__init__(world.db)
        self.times = times

    def append(self, principal: str, events: Sequence[Event], after: int) -> bool:
        if self.times:
            self.times -= 1
            return False
        return super().append(principal, events, after)


def test_a_delivery_that_loses_the_race_for_places_looks_again_then_gives_up_for_a_redelivery() -> None:
    world = MemoryWorld()
    messages = written(world, operation_ended(op(1), Status.SUCCEEDED, NOW))
    assert EventsWorker(EventsDeps(Raced(world, 2), world.event_bus)).process(messages) == 1
    world = MemoryWorld()
    messages = written(world, operation_ended(op(1), Status.SUCCEEDED, NOW))
    with pytest.raises(Exception, match="taken 5 times"):
        EventsWorker(EventsDeps(Raced(world, APPEND_RACES), world.event_bus)).process(messages)
    assert world.events.read("p", 0, 10) == []  # nothing placed: the batch comes again


def test_the_reader_follows_its_cursor_filters_without_losing_its_place_and_waits_a_bounded_time() -> None:
    world = MemoryWorld()
    site = Site("site-1", "p", NOW)
    messages = written(
        world,
        operation_ended(op(1, tenant="cust-1"), Status.SUCCEEDED, NOW),
        operation_ended(op(2, tenant="cust-2"), Status.SUCCEEDED, NOW + 1),
        site_paused(site, True, "maintenance", "p", NOW + 2),
    )
    worker(world).process(messages)
    reader, caller = FeedReader(world.events, world.clock), Caller("p", operator=False)

    page = reader.page(caller, None, 0, 2)
    assert [e["seq"] for e in page.events] == [1, 2] and page.after == 2
    assert [e["seq"] for e in reader.page(caller, None, page.after, 10).events] == [3]
    only = reader.page(caller, None, 0, 10, FeedFilter(tenant="cust-2"))
    assert [e["operation_id"] for e in only.events] == ["op_2"] and only.after == 3
    paused = reader.page(caller, None, 0, 2, FeedFilter(types=(EventType.SITE_PAUSED,)))
    assert paused.events == [] and paused.after == 2  # a full page read, none matched: the cursor moves on

    # nothing new: it waits (on the clock) at most MAX_WAIT_S, then answers empty at the same cursor
    started = world.clock.now()
    assert reader.page(caller, None, 3, 10, wait_s=60).events == []
    assert world.clock.now() - started == pytest.approx(MAX_WAIT_S, abs=0.5)

    # confinement: a principal reads only its own feed; an operator names whose
    with pytest.raises(Forbidden):
        reader.page(Caller("q", operator=False), "p", 0, 10)
    assert reader.page(Caller("q", operator=False), None, 0, 10).events == []
    assert len(reader.page(Caller("ops", operator=True), "p", 0, 10).events) == 3


def test_a_principal_longer_than_an_sqs_message_group_id_gets_a_stable_group_of_its_own() -> None:
    from sitedispatch.aws.events import MAX_GROUP_ID, event_group

    arn = "arn:aws:sts::123456789012:assumed-role/" + "r" * 200
    assert event_group("control-plane") == "control-plane"
    assert len(event_group(arn)) <= MAX_GROUP_ID and event_group(arn) == event_group(arn)
    assert event_group(arn) != event_group(arn + "x")
