"""SQS FIFO as the register describes it: a message group hands out one message at a time, in order, and is held
while a message of it is in flight; a received message comes back when its visibility runs out (a lost delete, a
stalled consumer); one deduplication id is dropped for five minutes per group; after REDRIVE_BACKSTOP_RECEIVES
receives a message moves to the dead-letter queue. The port adapters over it are the AWS adapters' twins."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.aws.sqs import SWEEP_HOLD_S
from sitedispatch.domain.events import EventMessage
from sitedispatch.domain.model import PublicationMessage, QueueMessage
from sitedispatch.domain.ports import DeadLetter
from sitedispatch.domain.resources import REDRIVE_BACKSTOP_RECEIVES
from sitedispatch.domain.webhooks import WebhookMessage
from tests.fakes import FakeClock

DEDUP_WINDOW_S = 300.0


@dataclass(eq=False)
class Message:
    number: int
    body: Any
    group: str
    dedup: str
    sent_at: float
    visible_at: float
    attributes: dict[str, str] = field(default_factory=dict)
    receives: int = 0
    handle: int = 0  # the latest receive's receipt handle; 0: never received, or made visible again
    in_flight_until: float = 0.0


class Fifo:
    def __init__(self, name: str, clock: FakeClock, visibility_s: float, dlq: Fifo | None = None) -> None:
        self.name, self.clock, self.visibility_s, self.dlq = name, clock, visibility_s, dlq
        self.messages: list[Message] = []
        self.seen: dict[tuple[str, str], float] = {}
        self.sent = 0
        self.handles = 0
        self.history: list[Message] = []  # every message ever accepted (what a replay fault sends again)
        self._quiet_until = 0.0  # nothing is receivable before then, unless the queue changes (the poll's fast path)

    def send(self, body: Any, group: str, dedup: str, attributes: dict[str, str] | None = None) -> str:
        now = self.clock.now()
        first = self.seen.get((group, dedup))
        if first is not None and now - first < DEDUP_WINDOW_S:
            return f"{self.name}-dup"
        self.seen[(group, dedup)] = now
        self.sent += 1
        message = Message(self.sent, body, group, dedup, now, now, dict(attributes or {}))
        self.messages.append(message)
        self.history.append(message)
        self._quiet_until = 0.0
        return f"{self.name}-{self.sent}"

    def _in_flight(self, message: Message, now: float) -> bool:
        return message.handle != 0 and message.in_flight_until > now

    def receivable(self) -> bool:
        return bool(self._heads(self.clock.now(), 1))

    def _heads(self, now: float, most: int) -> list[Message]:
        """Up to `most` messages a receive would get: from each group not held, its messages in order."""
        held: set[str] = set()
        taken: list[Message] = []
        for message in self.messages:
            if message.group in held:
                continue
            if self._in_flight(message, now) or message.visible_at > now:
                held.add(message.group)  # the group waits for this one
                continue
            taken.append(message)
            if len(taken) >= most:
                break
        return taken

    def receive(self, most: int, hold_s: float | None = None) -> list[tuple[Message, int]]:
        now = self.clock.now()
        if now < self._quiet_until:
            return []
        got: list[tuple[Message, int]] = []
        heads = self._heads(now, most)
        if not heads:
            self._quiet_until = self.next_change() or float("inf")
        for message in heads:
            if message.receives >= REDRIVE_BACKSTOP_RECEIVES and self.dlq is not None:
                self.messages.remove(message)
                self.dlq.send(message.body, message.group, f"{message.dedup}-backstop", message.attributes)
                continue
            message.receives += 1
            self.handles += 1
            message.handle = self.handles
            message.in_flight_until = now + (self.visibility_s if hold_s is None else hold_s)
            got.append((message, message.handle))
        return got

    def delete(self, message: Message, handle: int) -> bool:
        if message.handle != handle or not self._in_flight(message, self.clock.now()) or message not in self.messages:
            return False  # ReceiptHandleIsInvalid: received again since, or gone
        self.messages.remove(message)
        self._quiet_until = 0.0
        return True

    def change_visibility(self, message: Message, handle: int, seconds: float) -> None:
        now = self.clock.now()
        if message.handle != handle or not self._in_flight(message, now):
            return  # NOT_OURS_ANY_MORE: the adapter lets it pass (aws/sqs.py SqsVisibility)
        message.in_flight_until = now + seconds
        if seconds == 0:
            message.handle = 0
        self._quiet_until = 0.0

    def next_change(self) -> float | None:
        """When a message not receivable now may become so (its visibility ends, or its delay)."""
        now = self.clock.now()
        times = [m.in_flight_until for m in self.messages if self._in_flight(m, now)]
        times += [m.visible_at for m in self.messages if m.visible_at > now]
        return min(times, default=None)

    def depth(self) -> int:
        return len(self.messages)


class SimVisibility:
    def __init__(self, queue: Fifo, message: Message, handle: int) -> None:
        self.queue, self.message, self.handle = queue, message, handle
        self.receipt = f"{message.number}:{handle}"

    def change(self, seconds: float) -> None:
        self.queue.change_visibility(self.message, self.handle, seconds)


class SimOperationQueue:
    """The operations lanes and their dead-letter queues (aws/sqs.py SqsOperationQueue)."""

    def __init__(self, lanes: dict[str, Fifo]) -> None:
        self.lanes = lanes

    def send(self, message: QueueMessage, dedup_id: str, lane: str) -> str:
        return self.lanes[lane].send(message, message.site_id, dedup_id)

    def send_many(self, messages: Sequence[tuple[QueueMessage, str]], lane: str) -> None:
        for message, dedup_id in messages:
            self.send(message, dedup_id, lane)

    def wake(self, lane: str, receipts: Sequence[str]) -> int:
        fifo, woken = self.lanes[lane], 0
        for receipt in receipts:
            number, handle = (int(part) for part in receipt.split(":"))
            for message in fifo.messages:
                if message.number == number and message.handle == handle:
                    fifo.change_visibility(message, handle, 0)
                    woken += 1
        return woken

    def dead_letter(self, message: QueueMessage, dedup_id: str, attributes: dict[str, str], lane: str) -> str:
        dlq = self.lanes[lane].dlq
        assert dlq is not None
        return dlq.send(message, message.site_id, f"{dedup_id}-dead-a{attributes.get('attempt', '0')}", attributes)

    def sweep_dead_letters(
        self, lane: str, remove: Callable[[DeadLetter], bool], max_messages: int = 1000
    ) -> tuple[list[DeadLetter], list[DeadLetter]]:
        dlq = self.lanes[lane].dlq
        assert dlq is not None
        removed: list[DeadLetter] = []
        kept: list[tuple[DeadLetter, Message, int]] = []
        try:
            while len(removed) + len(kept) < max_messages:
                got = dlq.receive(min(10, max_messages - len(removed) - len(kept)), hold_s=SWEEP_HOLD_S)
                if not got:
                    break
                for message, handle in got:
                    letter = DeadLetter(lane, dict(message.attributes), message.sent_at)
                    if remove(letter):
                        dlq.delete(message, handle)
                        removed.append(letter)
                    else:
                        kept.append((letter, message, handle))
        finally:
            for _, message, handle in kept:
                dlq.change_visibility(message, handle, 0)
        return removed, [letter for letter, _, _ in kept]


class SimPublicationQueue:
    def __init__(self, queue: Fifo) -> None:
        self.queue = queue

    def send(self, message: PublicationMessage) -> str:
        return self.queue.send(message, message.group_id, message.dedup_id)


class SimEventQueue:
    def __init__(self, queue: Fifo) -> None:
        self.queue = queue

    def send(self, message: EventMessage) -> None:
        self.queue.send(message, message.principal, message.event_id)


class SimWebhookQueue:
    """aws/webhooks.py SqsWebhookQueue: grouped by endpoint, deduplicated by (endpoint, reason)."""

    def __init__(self, queue: Fifo) -> None:
        self.queue = queue

    def send(self, message: WebhookMessage) -> None:
        dedup = hashlib.sha256(f"{message.endpoint_id}:{message.reason}".encode()).hexdigest()
        self.queue.send(message, message.endpoint_id, dedup)
