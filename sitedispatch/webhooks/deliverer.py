"""The webhooks worker: each wake of an endpoint tells it of what its principal's feed holds after its cursor.

Messages are grouped by endpoint, so one wake at a time runs for an endpoint, and its attempts go in the feed's
order: the next event waits until the one before was accepted (or the endpoint is disabled). A wake ends when the
endpoint is caught up, when an attempt failed (the message comes back when the next attempt is due: the caller
holds it that long), or when its time is used (it wakes the endpoint again). Every write of the endpoint checks its
version: what a person changed meanwhile (a redelivery, a delete) wins, and the wake looks again shortly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sitedispatch import observability as obs
from sitedispatch.domain.events import FeedEntry, webhook_disabled
from sitedispatch.domain.ports import Clock, EventLog, WebhookQueue, WebhookSecrets, WebhookSender, WebhookStore
from sitedispatch.domain.webhooks import Attempt, Endpoint, RetryPolicy, WebhookMessage, after_attempt
from sitedispatch.webhooks.signing import payload, signed_headers

READ_PAGE = 50  # feed places read at once
WAKE_BUDGET_S = 60.0  # a wake starts no attempt past this (an attempt takes at most 15 s: inside a 120 s function)
LOOK_AGAIN_S = 1.0  # after losing a write to a person's change


@dataclass(frozen=True)
class WebhookDeps:
    store: WebhookStore
    events: EventLog
    secrets: WebhookSecrets
    sender: WebhookSender
    queue: WebhookQueue
    clock: Clock
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    rng: random.Random = field(default_factory=random.Random)


@dataclass(frozen=True)
class Wake:
    """How a wake ended: `retry_in` seconds until the endpoint is due again, or None (caught up, or disabled)."""

    retry_in: float | None = None


class WebhookDeliverer:
    def __init__(self, deps: WebhookDeps) -> None:
        self.deps = deps

    def wake(self, message: WebhookMessage) -> Wake:
        d = self.deps
        endpoint = d.store.get(message.principal, message.endpoint_id)
        started = d.clock.now()
        secrets: list[str] = []  # read once a wake (Secrets Manager bills each read), when an attempt needs them
        while endpoint is not None and endpoint.enabled:
            now = d.clock.now()
            if endpoint.next_attempt_at is not None and endpoint.next_attempt_at > now:
                return Wake(endpoint.next_attempt_at - now)
            moved, entry = self._head(endpoint)
            if entry is None:  # caught up: what was scheduled has nothing left to deliver
                moved = replace(moved, next_attempt_at=None, failing_since=None, failures=0)
                if moved != endpoint and d.store.save(moved) is None:
                    return Wake(LOOK_AGAIN_S)
                return Wake()
            if now - started >= WAKE_BUDGET_S:
                d.queue.send(WebhookMessage(message.principal, message.endpoint_id, f"more:{entry.seq}:{now:.0f}"))
                return Wake(None)
            secrets = secrets or d.secrets.signing(moved.endpoint_id, now)
            endpoint = self._attempt(moved, entry, secrets)
            if endpoint is None:
                return Wake(LOOK_AGAIN_S)
            if endpoint.next_attempt_at is not None:
                return Wake(max(0.0, endpoint.next_attempt_at - d.clock.now()))
        return Wake(None)

    def _attempt(self, endpoint: Endpoint, entry: FeedEntry, secrets: list[str]) -> Endpoint | None:
        """One attempt of `entry`, recorded; the endpoint as written after it (None: it changed meanwhile)."""
        d = self.deps
        body = payload(entry.event, entry.seq)
        sent_at = d.clock.now()
        headers = signed_headers(entry.event.event_id, sent_at, body, secrets)
        result = d.sender.send(endpoint.url, headers, body)
        now = d.clock.now()
        d.store.record(endpoint.endpoint_id, entry, Attempt.of(result, sent_at, redelivery=endpoint.replay is not None))
        following = after_attempt(endpoint, entry.seq, result, now, d.policy, d.rng)
        event = None
        if following.disabled is not None:
            event = webhook_disabled(endpoint.principal, endpoint.endpoint_id, following.disabled.value, now)
            obs.logger.warning(
                "webhook endpoint disabled",
                extra={"endpoint": endpoint.endpoint_id, "reason": following.disabled.value, "status": result.status},
            )
        return d.store.save(following.endpoint, event)

    def _head(self, endpoint: Endpoint) -> tuple[Endpoint, FeedEntry | None]:
        """The next place to deliver (a replayed one first, then the first the endpoint wants after its cursor), and
        the endpoint moved past the places it does not want."""
        events = self.deps.events
        while endpoint.replay is not None:
            first, last = endpoint.replay
            entries = events.read(endpoint.principal, first - 1, min(READ_PAGE, last - first + 1))
            wanted = next((e for e in entries if e.seq <= last and endpoint.wants(e)), None)
            if wanted is not None:
                return replace(endpoint, replay=(wanted.seq, last)), wanted
            more = bool(entries) and entries[-1].seq < last and len(entries) == min(READ_PAGE, last - first + 1)
            endpoint = replace(endpoint, replay=(entries[-1].seq + 1, last) if more else None)
        while True:
            entries = events.read(endpoint.principal, endpoint.cursor, READ_PAGE)
            wanted = next((e for e in entries if endpoint.wants(e)), None)
            if wanted is not None:
                return replace(endpoint, cursor=max(endpoint.cursor, wanted.seq - 1)), wanted
            if not entries:
                return endpoint, None
            endpoint = replace(endpoint, cursor=entries[-1].seq)
            if len(entries) < READ_PAGE:
                return endpoint, None


def wake_endpoints(store: WebhookStore, queue: WebhookQueue, principal: str, placed: Sequence[FeedEntry]) -> int:
    """After events took places in a principal's feed: wake each of its enabled endpoints that wants one of them."""
    if not placed:
        return 0
    woken = 0
    for endpoint in store.owned(principal):
        if endpoint.enabled and endpoint.wants_any(placed):
            queue.send(WebhookMessage(principal, endpoint.endpoint_id, f"placed:{placed[-1].seq}"))
            woken += 1
    return woken
