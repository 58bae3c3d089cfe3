"""What a principal does with its webhook endpoints: register, list, read, delete, rotate the secret, enable
again, read deliveries, and ask for a redelivery. Each endpoint is its principal's alone: another caller's id, an
operator's included, is unknown (404). Each change is audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sitedispatch.domain.errors import Conflict, InvalidInput, NotFound
from sitedispatch.domain.events import EventType
from sitedispatch.domain.model import AuditEntry
from sitedispatch.domain.ports import AuditLog, Clock, EventLog, WebhookQueue, WebhookSecrets, WebhookStore
from sitedispatch.domain.webhooks import (
    MAX_ENDPOINTS,
    MAX_REDELIVERY,
    Endpoint,
    WebhookDelivery,
    WebhookMessage,
    enabled_again,
    new_endpoint_id,
)
from sitedispatch.operator.access import Caller
from sitedispatch.webhooks.destination import DestinationRefused, Resolver, checked_address, parse, system_resolver


@dataclass(frozen=True)
class EndpointsDeps:
    store: WebhookStore
    secrets: WebhookSecrets
    events: EventLog
    queue: WebhookQueue
    audit: AuditLog
    clock: Clock
    allow_loopback: bool = False
    resolve: Resolver = system_resolver


class Endpoints:
    def __init__(self, deps: EndpointsDeps) -> None:
        self.deps = deps

    def register(
        self,
        caller: Caller,
        url: str,
        types: Sequence[EventType] = (),
        tenant: str | None = None,
        description: str = "",
    ) -> tuple[Endpoint, str]:
        """A new endpoint, told of the caller's events from now on; and its secret, shown this once."""
        d = self.deps
        try:
            checked_address(parse(url, d.allow_loopback), d.allow_loopback, d.resolve)
        except DestinationRefused as exc:
            self._audit(caller, "webhook.register", url, "refused", {"why": str(exc)})
            raise InvalidInput(str(exc)) from None
        if len(d.store.owned(caller.identity)) >= MAX_ENDPOINTS:
            raise Conflict(f"{caller.identity} has {MAX_ENDPOINTS} webhook endpoints: delete one first")
        now = d.clock.now()
        endpoint = Endpoint(
            endpoint_id=new_endpoint_id(),
            principal=caller.identity,
            url=url,
            created_at=now,
            cursor=d.events.last_seq(caller.identity),
            types=tuple(dict.fromkeys(types)),
            tenant=tenant,
            description=description,
        )
        secret = d.secrets.create(endpoint.endpoint_id)
        try:
            endpoint = d.store.create(endpoint)
        except Exception:
            d.secrets.delete(endpoint.endpoint_id)
            raise
        self._audit(
            caller, "webhook.register", endpoint.endpoint_id, "ok", {"types": [t.value for t in endpoint.types]}
        )
        return endpoint, secret

    def owned(self, caller: Caller) -> list[Endpoint]:
        return self.deps.store.owned(caller.identity)

    def get(self, caller: Caller, endpoint_id: str) -> Endpoint:
        endpoint = self.deps.store.get(caller.identity, endpoint_id)
        if endpoint is None:
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        return endpoint

    def delete(self, caller: Caller, endpoint_id: str) -> Endpoint:
        endpoint = self.get(caller, endpoint_id)
        if not self.deps.store.delete(caller.identity, endpoint_id):
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        self.deps.secrets.delete(endpoint_id)
        self._audit(caller, "webhook.delete", endpoint_id, "ok")
        return endpoint

    def rotate(self, caller: Caller, endpoint_id: str) -> tuple[str, float]:
        """A new secret; the old one keeps signing (beside it) until the returned time."""
        self.get(caller, endpoint_id)
        secret, previous_until = self.deps.secrets.rotate(endpoint_id, self.deps.clock.now())
        self._audit(caller, "webhook.rotate", endpoint_id, "ok")
        return secret, previous_until

    def enable(self, caller: Caller, endpoint_id: str) -> Endpoint:
        """A disabled endpoint receives again, from where it stopped (what its feed still holds)."""
        endpoint = self._change(caller, endpoint_id, enabled_again, "webhook.enable")
        self._wake(endpoint, f"enable:{self.deps.clock.now():.3f}")  # SQS drops a repeated id for 5 minutes
        return endpoint

    def redeliver(self, caller: Caller, endpoint_id: str, first: int, count: int = 1) -> Endpoint:
        """Send the events of feed places `first`..`first + count - 1` again (those the endpoint's filters want),
        before what follows its cursor."""
        endpoint = self.get(caller, endpoint_id)  # another's id: unknown, before anything is said of the range
        if first < 1 or not 1 <= count <= MAX_REDELIVERY:
            raise InvalidInput(f"a redelivery names from_seq >= 1 and 1 to {MAX_REDELIVERY} places")
        last = first + count - 1
        known = self.deps.events.last_seq(caller.identity)
        if last > known:
            raise Conflict(f"{caller.identity}'s feed holds places up to {known}: place {last} is not there yet")

        def replayed(endpoint: Endpoint) -> Endpoint:
            if endpoint.replay is not None:
                raise Conflict(f"a redelivery of places {endpoint.replay[0]}-{endpoint.replay[1]} is under way")
            return replace(endpoint, replay=(first, last), next_attempt_at=None, failing_since=None, failures=0)

        endpoint = self._change(
            caller, endpoint_id, replayed, "webhook.redeliver", {"from": first, "to": last}, read=endpoint
        )
        self._wake(endpoint, f"redeliver:{first}:{last}:{self.deps.clock.now():.3f}")
        return endpoint

    def deliveries(self, caller: Caller, endpoint_id: str, before: int | None, limit: int) -> list[WebhookDelivery]:
        self.get(caller, endpoint_id)
        return self.deps.store.deliveries(endpoint_id, before, limit)

    def _change(
        self,
        caller: Caller,
        endpoint_id: str,
        change: Any,
        action: str,
        detail: dict[str, Any] | None = None,
        read: Endpoint | None = None,
    ) -> Endpoint:
        """`change` applied to the endpoint as read (`read`, if the caller read it already), again on a lost race."""
        for _ in range(5):
            endpoint = read or self.get(caller, endpoint_id)
            read = None
            saved = self.deps.store.save(change(endpoint))
            if saved is not None:
                self._audit(caller, action, endpoint_id, "ok", detail or {})
                return saved
        raise Conflict(f"webhook endpoint {endpoint_id} is changing: try again")

    def _wake(self, endpoint: Endpoint, reason: str) -> None:
        self.deps.queue.send(WebhookMessage(endpoint.principal, endpoint.endpoint_id, reason))

    def _audit(
        self, caller: Caller, action: str, target: str, outcome: str, detail: dict[str, Any] | None = None
    ) -> None:
        self.deps.audit.record(
            AuditEntry(self.deps.clock.now(), caller.identity, action, target, outcome, detail=detail or {})
        )
