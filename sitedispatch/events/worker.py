"""The events worker: each event its transition wrote gets its place in its principal's feed, then goes on the bus.

Messages arrive grouped by principal (the events queue's message group), so one delivery at a time appends to a
principal's feed: the places it gives are the ones after the feed's last, written with a condition that each is
still free, and each event's row records its place in the same transaction. A second delivery of the same events
finds them placed and gives none twice; two deliveries at once (a visibility expired) meet on the condition, and
the loser looks again. The bus comes before the places: at least once, with the event's id. Once placed, the
principal's webhook endpoints that want one of them are woken (again when the batch comes back, had it stopped first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sitedispatch import observability as obs
from sitedispatch.domain.errors import TransientError
from sitedispatch.domain.events import EventMessage, FeedEntry, StoredEvent
from sitedispatch.domain.ports import EventBus, EventLog, WebhookQueue, WebhookStore
from sitedispatch.webhooks.deliverer import wake_endpoints

APPEND_RACES = 5  # how often one delivery looks again when another took the places it wanted


@dataclass(frozen=True)
class EventsDeps:
    events: EventLog
    bus: EventBus
    webhooks: WebhookStore | None = None  # None: no webhooks to wake (tests of the feed alone)
    webhook_queue: WebhookQueue | None = None


class EventsWorker:
    def __init__(self, deps: EventsDeps) -> None:
        self.deps = deps

    def process(self, messages: Sequence[EventMessage]) -> int:
        """Deliver a batch: returns how many events took a feed place now. Raises (the batch is delivered again)
        when a step failed; every step is safe to repeat."""
        ids = list(dict.fromkeys(m.event_id for m in messages))
        stored = self.deps.events.get_many(ids)
        if len(stored) < len(ids):  # sent only after its row committed: only a retention past its time explains it
            found = {s.event.event_id for s in stored}
            obs.logger.warning("event messages name no event", extra={"events": [i for i in ids if i not in found]})
        pending = [s for s in stored if s.seq is None]  # a placed event is on the bus already: a duplicate message
        # Placed by an earlier delivery of these messages (which may have stopped before waking the endpoints)
        entries = [FeedEntry(s.seq, s.event) for s in stored if s.seq is not None]
        if pending:
            # The bus first, then the places (which record it on the bus, in the same transaction): a delivery that
            # stops between the two puts the events on the bus again, with the same ids.
            self.deps.bus.put([s.event for s in pending])
        by_principal: dict[str, list[StoredEvent]] = {}
        for event in pending:
            by_principal.setdefault(event.event.principal, []).append(event)
        placed = 0
        for principal, events in by_principal.items():
            new = self._place(principal, events)
            placed += len(new)
            entries += new
        self._wake(entries)
        return placed

    def _wake(self, entries: list[FeedEntry]) -> None:
        """Each principal's endpoints that want one of its events placed now or before (a wake again is harmless:
        it finds nothing to do, or SQS drops it as a duplicate)."""
        if self.deps.webhooks is None or self.deps.webhook_queue is None:
            return
        by_principal: dict[str, list[FeedEntry]] = {}
        for entry in sorted(entries, key=lambda e: e.seq):
            by_principal.setdefault(entry.event.principal, []).append(entry)
        for principal, placed in by_principal.items():
            wake_endpoints(self.deps.webhooks, self.deps.webhook_queue, principal, placed)

    def _place(self, principal: str, stored: list[StoredEvent]) -> list[FeedEntry]:
        events = self.deps.events
        for _ in range(APPEND_RACES):
            unplaced = sorted((s.event for s in stored if s.seq is None), key=lambda e: (e.time, e.event_id))
            if not unplaced:
                return []
            after = events.last_seq(principal)
            if events.append(principal, unplaced, after):
                return [FeedEntry(n, event) for n, event in enumerate(unplaced, start=after + 1)]
            stored = events.get_many([s.event.event_id for s in stored])  # which of them another delivery placed
        raise TransientError(f"{principal}'s feed places were taken {APPEND_RACES} times in a row")
