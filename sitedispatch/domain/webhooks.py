"""Webhooks: a principal's endpoints, each told of the principal's events by a signed POST.

An endpoint follows its principal's feed with a cursor of its own (the last place it was told of, or chose to skip
by its filters): it is told of the events in the feed's order, one at a time, and the next waits until the one
before was accepted. A failed attempt is tried again on a schedule (Standard Webhooks' and Svix's: 5 s, 5 min, 30 min,
2 h, 5 h, 10 h, 10 h, each ±20 %), later if the receiver asks for it (`Retry-After`), for at least `window_s` (24 h)
from the first failure; past it, or at a `410 Gone`, the endpoint is disabled and a `webhook.disabled` event says so.
A redelivery asks for a range of the feed's places to be sent again, before what follows the cursor.

Every delivery of an event carries the event's id as `webhook-id`, so a receiver deduplicates by it.
"""

from __future__ import annotations

import base64
import json
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from sitedispatch.domain.events import EventType, FeedEntry

ATTEMPT_TIMEOUT_S = 15.0  # the longest one POST may take, connection included
RETRY_DELAYS_S = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
RETRY_WINDOW_S = 24 * 3600.0  # an event is tried at least this long after its first failed attempt
RETRY_JITTER = 0.2
RETRY_AFTER_MAX_S = 12 * 3600.0  # a receiver's Retry-After is honoured up to SQS's longest visibility timeout
ROTATION_OVERLAP_S = 24 * 3600.0  # after a rotation, deliveries carry both signatures this long
MAX_ENDPOINTS = 20  # per principal
MAX_REDELIVERY = 1000  # places one redelivery may name
RESPONSE_KEPT_CHARS = 256  # of a receiver's answer, kept with the attempt (what a person needs to see why it failed)
ENDPOINT_ID_PREFIX = "whk_"
SECRET_PREFIX = "whsec_"  # Standard Webhooks' spelling of a secret: the prefix, then base64 of its bytes


class Disabled(StrEnum):
    """Why an endpoint stopped receiving."""

    GONE = "gone"  # it answered 410
    FAILING = "failing"  # an event failed for longer than the retry window


def new_endpoint_id() -> str:
    return ENDPOINT_ID_PREFIX + secrets.token_hex(12)


def accepted(status: int | None) -> bool:
    """A receiver took a delivery: it answered 2xx."""
    return status is not None and 200 <= status < 300


def signing_secrets(current: str, previous: str | None, previous_until: float, now: float) -> list[str]:
    """What signs a delivery at `now`: the current secret, and during a rotation's overlap the previous one too."""
    return [current, previous] if previous and now < previous_until else [current]


def new_secret() -> str:
    """24 random bytes, as Standard Webhooks writes a secret (its libraries verify with it as given)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


@dataclass(frozen=True)
class RetryPolicy:
    delays_s: tuple[float, ...] = RETRY_DELAYS_S
    window_s: float = RETRY_WINDOW_S
    jitter: float = RETRY_JITTER

    @classmethod
    def scaled(cls, scale: float) -> RetryPolicy:
        """The schedule and window multiplied by `scale` (1: as specified)."""
        return cls(tuple(d * scale for d in RETRY_DELAYS_S), RETRY_WINDOW_S * scale)

    def delay(self, failures: int, retry_after_s: float | None, rng: random.Random) -> float:
        """The wait before the next attempt, after `failures` failed attempts of one event (>= 1)."""
        base = self.delays_s[min(failures, len(self.delays_s)) - 1]
        wait = base * (1 + rng.uniform(-self.jitter, self.jitter))
        if retry_after_s is not None:
            wait = max(wait, min(retry_after_s, RETRY_AFTER_MAX_S))
        return wait


@dataclass(frozen=True)
class Endpoint:
    """One receiver of a principal's events. `cursor`: the last feed place it is done with. `replay`: places
    (first, last) to send again before going on from the cursor. `failing_since` / `failures`: the head event's
    failed attempts so far; `next_attempt_at`: when it is tried again."""

    endpoint_id: str
    principal: str
    url: str
    created_at: float
    cursor: int
    types: tuple[EventType, ...] = ()  # empty: every type
    tenant: str | None = None
    description: str = ""
    disabled: Disabled | None = None
    disabled_at: float | None = None
    next_attempt_at: float | None = None
    failing_since: float | None = None
    failures: int = 0
    replay: tuple[int, int] | None = None
    version: int = 0  # every write of the row checks and bumps it

    def wants(self, entry: FeedEntry) -> bool:
        event = entry.event
        return (not self.types or event.type in self.types) and (self.tenant is None or event.tenant == self.tenant)

    def wants_any(self, entries: Sequence[FeedEntry]) -> bool:
        return any(self.wants(entry) for entry in entries)

    @property
    def enabled(self) -> bool:
        return self.disabled is None


@dataclass(frozen=True)
class AttemptResult:
    """What one POST came to: a status (None when none came back) and what the receiver said."""

    status: int | None
    duration_s: float
    error: str | None = None  # no answer: refused, timed out, an address not allowed
    response: str = ""  # the first RESPONSE_KEPT_CHARS of its body
    retry_after_s: float | None = None

    @property
    def accepted(self) -> bool:
        return accepted(self.status)

    @property
    def gone(self) -> bool:
        return self.status == 410


@dataclass(frozen=True)
class Attempt:
    """One attempt of one event to one endpoint, as kept in its delivery."""

    at: float
    status: int | None
    duration_s: float
    error: str | None = None
    response: str = ""
    redelivery: bool = False

    @classmethod
    def of(cls, result: AttemptResult, at: float, redelivery: bool) -> Attempt:
        return cls(at, result.status, round(result.duration_s, 3), result.error, result.response, redelivery)


@dataclass(frozen=True)
class WebhookDelivery:
    """One event's deliveries to one endpoint: each attempt, and whether one was accepted."""

    endpoint_id: str
    seq: int
    event_id: str
    type: EventType
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)

    @property
    def delivered(self) -> bool:
        return any(accepted(a.status) for a in self.attempts)


@dataclass(frozen=True)
class Next:
    """What follows an attempt: the endpoint as it is to be written, and whether to wait (`retry_in`) or to stop
    (`disabled`)."""

    endpoint: Endpoint
    retry_in: float | None = None
    disabled: Disabled | None = None


def after_attempt(
    endpoint: Endpoint, seq: int, result: AttemptResult, now: float, policy: RetryPolicy, rng: random.Random
) -> Next:
    """The endpoint after an attempt of place `seq` (its head: a replayed place or the one after its cursor)."""
    if result.accepted:
        done = replace(endpoint, next_attempt_at=None, failing_since=None, failures=0)
        if endpoint.replay is not None:
            last = endpoint.replay[1]
            return Next(replace(done, replay=(seq + 1, last) if seq < last else None))
        return Next(replace(done, cursor=max(endpoint.cursor, seq)))
    if result.gone:
        return Next(_disable(endpoint, Disabled.GONE, now), disabled=Disabled.GONE)
    since = endpoint.failing_since if endpoint.failing_since is not None else now
    failures = endpoint.failures + 1
    if now - since >= policy.window_s:
        return Next(_disable(endpoint, Disabled.FAILING, now), disabled=Disabled.FAILING)
    wait = policy.delay(failures, result.retry_after_s, rng)
    return Next(
        replace(endpoint, failing_since=since, failures=failures, next_attempt_at=now + wait),
        retry_in=wait,
    )


def _disable(endpoint: Endpoint, reason: Disabled, now: float) -> Endpoint:
    return replace(endpoint, disabled=reason, disabled_at=now, next_attempt_at=None)


def enabled_again(endpoint: Endpoint) -> Endpoint:
    """An endpoint a person enabled: from where it stopped, its failures forgotten."""
    return replace(endpoint, disabled=None, disabled_at=None, next_attempt_at=None, failing_since=None, failures=0)


@dataclass(frozen=True)
class WebhookMessage:
    """A webhooks queue message: look at this endpoint (grouped by endpoint: one delivery to it at a time).
    `reason` makes its deduplication id: the feed place that woke it, a redelivery, a sweep."""

    principal: str
    endpoint_id: str
    reason: str = ""

    def to_body(self) -> str:
        return json.dumps({"principal": self.principal, "endpoint_id": self.endpoint_id}, separators=(",", ":"))

    @classmethod
    def from_body(cls, body: str) -> WebhookMessage:
        data = json.loads(body)
        if not (
            isinstance(data, dict)
            and isinstance(data.get("principal"), str)
            and isinstance(data.get("endpoint_id"), str)
        ):
            raise ValueError("a webhooks message names principal and endpoint_id")
        return cls(data["principal"], data["endpoint_id"])
