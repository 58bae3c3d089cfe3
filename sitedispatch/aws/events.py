"""Events on AWS: the outbox row a transition writes in its own transaction, the message that announces it, the
per-principal feed the events worker appends to, and the EventBridge bus.

A transition writes its event's row in its transaction (`EventOutbox.add`) and, once that commits, sends the
event's message to the events queue (grouped by principal, deduplicated by event id). A message lost (a worker killed
between its commit and its send) is sent again by the reconciler, which finds the row still undelivered.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from sitedispatch import observability as obs
from sitedispatch.aws.tables import UNDELIVERED, EventItem, FeedItem, Models, index_shard, index_shards
from sitedispatch.aws.writes import NamedTransaction, TransactionFailed, get_items, read_all, transaction
from sitedispatch.domain.events import (
    EVENT_SOURCE,
    FEED_RETENTION_DAYS,
    Event,
    EventMessage,
    EventType,
    FeedEntry,
    StoredEvent,
)

RETENTION_S = FEED_RETENTION_DAYS * 24 * 3600
MAX_GROUP_ID = 128  # SQS's longest MessageGroupId
PUT_EVENTS_BATCH = 10  # PutEvents' most entries


def event_group(principal: str) -> str:
    """The events queue's message group of a principal: the principal itself when SQS allows it (128 characters),
    else a digest of it (an IAM ARN can be longer)."""
    if len(principal) <= MAX_GROUP_ID:
        return principal
    return "p-" + hashlib.sha256(principal.encode()).hexdigest()


def to_stored(item: EventItem) -> StoredEvent:
    return StoredEvent(
        event=Event.from_wire(dict(item.body)),
        seq=int(item.seq) if item.seq is not None else None,
        on_bus=bool(item.on_bus),
    )


class EventOutbox:
    """Writes an event with its transition, and announces it once the transition committed."""

    def __init__(self, models: Models, announce: Callable[[EventMessage], None]) -> None:
        self.E = models.Event
        self.announce = announce

    def add(self, tx: NamedTransaction, event: Event, name: str = "event") -> None:
        """`name`: the item's name in `tx` (a transaction telling several principals names each)."""
        E = self.E
        item = E(
            event.event_id,
            principal=event.principal,
            type=event.type.value,
            time=event.time,
            body=event.wire(),
            undelivered=index_shard(UNDELIVERED, event.event_id),
            expires_at=int(event.time + RETENTION_S),
        )
        tx.save(name, item, condition=E.event_id.does_not_exist())
        tx.after_commit(lambda: self.send(EventMessage.of(event)))

    def send(self, message: EventMessage) -> None:
        """Announce a committed event; a failure is only logged: the reconciler sends it again."""
        try:
            self.announce(message)
        except Exception:  # the transition it reports has committed; the sweep repairs the send
            obs.logger.exception(
                "event not announced: the reconciler sends it again", extra={"event": message.event_id}
            )


class DynamoEventLog:
    """The events table (what happened) and the feed table (each principal's events in order)."""

    def __init__(self, models: Models) -> None:
        self.E: type[EventItem] = models.Event
        self.F: type[FeedItem] = models.Feed

    def get_many(self, event_ids: Sequence[str]) -> list[StoredEvent]:
        return [to_stored(item) for item in read_all(self.E, list(dict.fromkeys(event_ids)))]

    def last_seq(self, principal: str) -> int:
        F = self.F
        for item in F.query(principal, scan_index_forward=False, limit=1, consistent_read=True):
            return int(item.seq)
        return 0

    def append(self, principal: str, events: Sequence[Event], after: int) -> bool:
        """Give `events` the feed places after `after` and record on each one's row its place and that it is on the
        bus (out of the undelivered index), in one transaction: False if a place was taken meanwhile or an event
        already has one (another delivery got there first)."""
        E, F = self.E, self.F
        try:
            with transaction(F) as tx:
                for n, event in enumerate(events, start=after + 1):
                    tx.save(
                        f"place:{n}",
                        F(
                            principal,
                            n,
                            event_id=event.event_id,
                            type=event.type.value,
                            tenant=event.tenant,
                            body=event.wire(n),
                            expires_at=int(event.time + RETENTION_S),
                        ),
                        condition=F.seq.does_not_exist(),
                    )
                    placed = [E.seq.set(n), E.on_bus.set(True), E.undelivered.remove()]
                    tx.update(f"event:{event.event_id}", E(event.event_id), placed, E.seq.does_not_exist())
        except TransactionFailed:
            return False
        return True

    def undelivered(self, before: float, limit: int = 1000) -> list[EventMessage]:
        """Events written before `before` and not yet delivered, oldest first (an index: eventually consistent; a
        delivered one still listed is sent again, harmlessly)."""
        E = self.E
        keys = [
            item.event_id
            for shard in index_shards(UNDELIVERED)
            for item in E.by_undelivered.query(shard, E.time < before, limit=limit)
        ]
        rows = get_items(*((E, key) for key in keys[:limit]))
        found = [row for row in rows if isinstance(row, E) and row.undelivered is not None]
        return [EventMessage(row.event_id, row.principal) for row in sorted(found, key=lambda r: float(r.time))]

    def read(self, principal: str, after: int, limit: int) -> list[FeedEntry]:
        """The feed's entries after place `after`, in order (a consistent read: every place up to the last one
        returned is filled, so a reader that continues from it skips nothing)."""
        F = self.F
        items = F.query(principal, F.seq > after, limit=limit, consistent_read=True)
        return [FeedEntry(int(item.seq), Event.from_wire(dict(item.body))) for item in items]


class SqsEventQueue:
    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.url = url

    def send(self, message: EventMessage) -> None:
        self.client.send_message(
            QueueUrl=self.url,
            MessageBody=message.to_body(),
            MessageGroupId=event_group(message.principal),
            MessageDeduplicationId=message.event_id,
        )


class EventBridgeBus:
    """The custom bus: `source` sitedispatch, `detail-type` the event's type, `detail` its wire form."""

    def __init__(self, client: Any, bus_name: str) -> None:
        self.client = client
        self.bus_name = bus_name

    def put(self, events: Sequence[Event]) -> None:
        for start in range(0, len(events), PUT_EVENTS_BATCH):
            batch = events[start : start + PUT_EVENTS_BATCH]
            response = self.client.put_events(Entries=[self._entry(event) for event in batch])
            if response.get("FailedEntryCount"):
                failed = [e.get("ErrorCode") for e in response.get("Entries", []) if e.get("ErrorCode")]
                raise RuntimeError(f"EventBridge refused {len(failed)} of {len(batch)} events: {sorted(set(failed))}")

    def _entry(self, event: Event) -> dict[str, Any]:
        return {
            "EventBusName": self.bus_name,
            "Source": EVENT_SOURCE,
            "DetailType": EventType(event.type).detail_type,
            "Detail": json.dumps(event.wire(), separators=(",", ":")),
            "Time": _as_datetime(event.time),
        }


def _as_datetime(seconds: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, UTC)
