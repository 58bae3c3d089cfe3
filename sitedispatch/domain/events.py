"""Events: what a producer is told. An operation ended, a publication went live, a site paused or resumed.

An event is built by the transition it reports and written in that transition's own DynamoDB transaction (an outbox
row), so a transition that happened always has its event, whatever dies after the commit. Its id is derived from the
transition (an operation's epoch, a publication's sequence, a pause's time), so every delivery of it, on the bus, in
the feed or to a webhook, carries the same id: a consumer deduplicates by it.

An event names ids and outcomes only, never an input, content, a credential or a secret. Its wire form
(`Event.wire()`) is the published schema (`events.schema.json`), versioned by `EVENT_SCHEMA_VERSION`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sitedispatch.domain.model import ErrorInfo, Operation, Site, Status

EVENT_SCHEMA_VERSION = 1
EVENT_SOURCE = "sitedispatch"  # the EventBridge `source` of every event
AUTOMATIC = "sitedispatch"  # who paused a site that failed too often in a row
OPERATOR = "operator"  # who paused or resumed a site, when an operator did (an event names no operator)
FEED_RETENTION_DAYS = 7  # how long the per-principal feed keeps an event (DynamoDB TTL; the bus keeps none)


class EventType(StrEnum):
    OPERATION_SUCCEEDED = "operation.succeeded"
    OPERATION_DEAD = "operation.dead"
    OPERATION_CANCELLED = "operation.cancelled"
    OPERATION_SUPERSEDED = "operation.superseded"
    PUBLICATION_LIVE = "publication.live"
    SITE_PAUSED = "site.paused"
    SITE_RESUMED = "site.resumed"
    WEBHOOK_DISABLED = "webhook.disabled"
    DEPENDENCY_PAUSED = "dependency.paused"
    DEPENDENCY_RESUMED = "dependency.resumed"

    @property
    def detail_type(self) -> str:
        """EventBridge's `detail-type`: what a rule matches on."""
        return self.value


TERMINAL_EVENTS = {
    Status.SUCCEEDED: EventType.OPERATION_SUCCEEDED,
    Status.DEAD: EventType.OPERATION_DEAD,
    Status.CANCELLED: EventType.OPERATION_CANCELLED,
    Status.SUPERSEDED: EventType.OPERATION_SUPERSEDED,
}


def _event_id(*parts: object) -> str:
    return "evt_" + hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Event:
    """One event. `detail` holds the type's own fields (ids and outcomes); the rest is common to every type."""

    event_id: str
    type: EventType
    principal: str
    site_id: str | None  # None: an event about no site (webhook.disabled)
    time: float
    tenant: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def wire(self, seq: int | None = None) -> dict[str, Any]:
        """The event as every consumer receives it (the bus's `detail`, a feed entry, a webhook's body). `seq`: its
        place in its principal's feed, once it has one."""
        body: dict[str, Any] = {
            "id": self.event_id,
            "type": self.type.value,
            "schema_version": EVENT_SCHEMA_VERSION,
            "time": self.time,
            "principal": self.principal,
            "tenant": self.tenant,
            "site_id": self.site_id,
            **self.detail,
        }
        if seq is not None:
            body["seq"] = seq
        return body

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Event:
        common = {"id", "type", "schema_version", "time", "principal", "tenant", "site_id", "seq"}
        return cls(
            event_id=body["id"],
            type=EventType(body["type"]),
            principal=body["principal"],
            site_id=body.get("site_id"),
            time=float(body["time"]),
            tenant=body.get("tenant"),
            detail={k: v for k, v in body.items() if k not in common},
        )


def _error_detail(error: ErrorInfo | None) -> dict[str, Any]:
    """An error's class and code: never its message, which may quote an input."""
    if error is None:
        return {}
    return {"error_class": error.error_class, "error_code": error.code}


def operation_ended(
    op: Operation,
    status: Status,
    now: float,
    *,
    error: ErrorInfo | None = None,
    revision_id: str | None = None,
    version: int | None = None,
    evidence_key: str | None = None,
    superseded_by: str | None = None,
) -> Event:
    """The one event of an operation's epoch reaching `status` (terminal). Its id is the epoch's: a replay, which
    starts a new epoch, ends with a new event."""
    detail: dict[str, Any] = {
        "operation_id": op.operation_id,
        "kind": op.kind.value,
        "status": status.value,
        "epoch": op.epoch,
        "attempt": op.attempt,
        "accepted_at": op.created_at,
        "started_at": op.started_at,
        "finished_at": now,
        **_error_detail(error),
    }
    for key, value in (
        ("revision_id", revision_id),
        ("version", version),
        ("evidence_key", evidence_key),
        ("superseded_by", superseded_by),
    ):
        if value is not None:
            detail[key] = value
    return Event(
        event_id=terminal_event_id(op.operation_id, op.epoch),
        type=TERMINAL_EVENTS[status],
        principal=op.principal,
        tenant=op.tenant or None,
        site_id=op.site_id,
        time=now,
        detail=detail,
    )


def terminal_event_id(operation_id: str, epoch: int) -> str:
    """The id of the one event an operation's epoch ends with, whichever way it ends."""
    return _event_id("operation", operation_id, epoch)


def publication_live(site: Site, seq: int, revision_id: str, receipt_key: str, now: float) -> Event:
    """A site's publication `seq` promoted: readers now see `revision_id`."""
    return Event(
        event_id=_event_id("live", site.site_id, seq),
        type=EventType.PUBLICATION_LIVE,
        principal=site.principal,
        site_id=site.site_id,
        time=now,
        detail={"publication_seq": seq, "revision_id": revision_id, "receipt_key": receipt_key},
    )


def site_paused(site: Site, paused: bool, reason: str | None, by: str, now: float) -> Event:
    """A site paused or resumed `by` a caller, or paused by AUTOMATIC after consecutive failures."""
    detail: dict[str, Any] = {"by": by}
    if paused and reason:
        detail["reason"] = reason
    return Event(
        event_id=_event_id("pause", site.site_id, paused, repr(now)),
        type=EventType.SITE_PAUSED if paused else EventType.SITE_RESUMED,
        principal=site.principal,
        site_id=site.site_id,
        time=now,
        detail=detail,
    )


def dependency_changed(
    dependency_id: str,
    principal: str,
    paused: bool,
    by: str,
    now: float,
    reason: str | None = None,
    evidence: Any = None,
) -> Event:
    """A dependency one of the principal's sites names paused (by an operator, or its breaker opened: `by` says
    which, with the reason and the failures that opened it) or resumed (by an operator, or its probe succeeded)."""
    detail: dict[str, Any] = {"dependency_id": dependency_id, "by": by}
    if paused and reason:
        detail["reason"] = reason
    own = [{k: v for k, v in e.items() if k != "principal"} for e in evidence or () if e.get("principal") == principal]
    if own:
        detail["evidence"] = own  # of its own sites only: who else shares the dependency is not told
    return Event(
        event_id=_event_id("dependency", dependency_id, principal, paused, repr(now)),
        type=EventType.DEPENDENCY_PAUSED if paused else EventType.DEPENDENCY_RESUMED,
        principal=principal,
        site_id=None,
        time=now,
        detail=detail,
    )


def webhook_disabled(principal: str, endpoint_id: str, reason: str, now: float) -> Event:
    """One of the principal's webhook endpoints stopped receiving (`reason`: gone, failing); told in its feed and on
    the bus, and to its other endpoints. Not its URL: a URL may carry a receiver's token."""
    return Event(
        event_id=_event_id("webhook-disabled", endpoint_id, repr(now)),
        type=EventType.WEBHOOK_DISABLED,
        principal=principal,
        site_id=None,
        time=now,
        detail={"endpoint_id": endpoint_id, "reason": reason},
    )


@dataclass(frozen=True)
class EventMessage:
    """The whole body of an events message: which event, and whose feed it goes to (its message group)."""

    event_id: str
    principal: str

    @classmethod
    def of(cls, event: Event) -> EventMessage:
        return cls(event.event_id, event.principal)

    def to_body(self) -> str:
        return json.dumps({"event_id": self.event_id, "principal": self.principal}, separators=(",", ":"))

    @classmethod
    def from_body(cls, body: str) -> EventMessage:
        data = json.loads(body)
        if not (
            isinstance(data, dict) and isinstance(data.get("event_id"), str) and isinstance(data.get("principal"), str)
        ):
            raise ValueError("an events message names event_id and principal")
        return cls(data["event_id"], data["principal"])


@dataclass(frozen=True)
class StoredEvent:
    """An event as its row holds it: its place in the feed once it has one, and whether it is on the bus."""

    event: Event
    seq: int | None = None
    on_bus: bool = False


@dataclass(frozen=True)
class FeedEntry:
    """One place of a principal's feed."""

    seq: int
    event: Event
