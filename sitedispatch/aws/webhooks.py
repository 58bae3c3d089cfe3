"""Webhooks on AWS: endpoints and deliveries in DynamoDB, signing secrets in Secrets Manager, wakes on a FIFO
queue grouped by endpoint."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from botocore.exceptions import ClientError

from sitedispatch.aws.events import RETENTION_S, EventOutbox
from sitedispatch.aws.tables import WEBHOOK_DUE, DeliveryItem, Models, WebhookItem, index_shard, index_shards
from sitedispatch.aws.writes import (
    TransactionFailed,
    conditionally,
    get_item,
    get_items,
    single_write,
    transaction,
)
from sitedispatch.domain.errors import TransientError
from sitedispatch.domain.events import Event, EventType, FeedEntry
from sitedispatch.domain.resources import WEBHOOK_SECRET_PREFIX
from sitedispatch.domain.webhooks import (
    ROTATION_OVERLAP_S,
    Attempt,
    Disabled,
    Endpoint,
    WebhookDelivery,
    WebhookMessage,
    new_secret,
    signing_secrets,
)


def _endpoint(item: WebhookItem) -> Endpoint:
    replay = None
    if item.replay_from is not None and item.replay_to is not None:
        replay = (int(item.replay_from), int(item.replay_to))
    return Endpoint(
        endpoint_id=item.endpoint_id,
        principal=item.principal,
        url=item.url,
        created_at=float(item.created_at),
        cursor=int(item.cursor),
        types=tuple(EventType(str(t)) for t in item.types or ()),
        tenant=item.tenant,
        description=item.description or "",
        disabled=Disabled(item.disabled) if item.disabled else None,
        disabled_at=item.disabled_at,
        next_attempt_at=item.next_attempt_at,
        failing_since=item.failing_since,
        failures=int(item.failures or 0),
        replay=replay,
        version=int(item.version),
    )


def _waiting(endpoint: Endpoint, before: float) -> bool:
    """An attempt due before `before`, or a redelivery asked for."""
    if not endpoint.enabled:
        return False
    return endpoint.replay is not None or (endpoint.next_attempt_at is not None and endpoint.next_attempt_at < before)


class DynamoWebhookStore:
    def __init__(self, models: Models, outbox: EventOutbox) -> None:
        self.W: type[WebhookItem] = models.Webhook
        self.D: type[DeliveryItem] = models.Delivery
        self.outbox = outbox

    def _item(self, endpoint: Endpoint, version: int) -> WebhookItem:
        waiting = endpoint.enabled and (endpoint.next_attempt_at is not None or endpoint.replay is not None)
        return self.W(
            endpoint.principal,
            endpoint.endpoint_id,
            url=endpoint.url,
            created_at=endpoint.created_at,
            cursor=endpoint.cursor,
            types=[t.value for t in endpoint.types] or None,
            tenant=endpoint.tenant,
            description=endpoint.description or None,
            disabled=endpoint.disabled.value if endpoint.disabled else None,
            disabled_at=endpoint.disabled_at,
            next_attempt_at=endpoint.next_attempt_at,
            failing_since=endpoint.failing_since,
            failures=endpoint.failures,
            replay_from=endpoint.replay[0] if endpoint.replay else None,
            replay_to=endpoint.replay[1] if endpoint.replay else None,
            version=version,
            due=index_shard(WEBHOOK_DUE, endpoint.endpoint_id) if waiting else None,
            due_at=(endpoint.next_attempt_at or 0.0) if waiting else None,
        )

    def create(self, endpoint: Endpoint) -> Endpoint:
        W = self.W
        item = self._item(endpoint, 1)
        if not conditionally(lambda: item.save(condition=W.endpoint_id.does_not_exist())):
            raise TransientError(f"webhook endpoint id {endpoint.endpoint_id} taken: register again")
        return _endpoint(item)

    def get(self, principal: str, endpoint_id: str) -> Endpoint | None:
        item = get_item(self.W, principal, endpoint_id) if endpoint_id else None
        return _endpoint(item) if item is not None else None

    def owned(self, principal: str) -> list[Endpoint]:
        found = [_endpoint(item) for item in self.W.query(principal, consistent_read=True)]
        return sorted(found, key=lambda e: (e.created_at, e.endpoint_id))

    def due(self, before: float, limit: int = 1000) -> list[Endpoint]:
        W = self.W
        keys = [
            (item.principal, item.endpoint_id)
            for shard in index_shards(WEBHOOK_DUE)
            for item in W.by_due.query(shard, W.due_at < before, limit=limit)
        ]
        rows = get_items(*((W, principal, endpoint_id) for principal, endpoint_id in keys[:limit]))
        found = [_endpoint(row) for row in rows if isinstance(row, W)]  # the index may lag: read each row
        return [e for e in found if _waiting(e, before)]

    def save(self, endpoint: Endpoint, event: Event | None = None) -> Endpoint | None:
        W = self.W
        item = self._item(endpoint, endpoint.version + 1)
        condition = W.version == endpoint.version
        if event is None:
            return _endpoint(item) if conditionally(lambda: item.save(condition=condition)) else None
        try:
            with transaction(W) as tx:
                tx.save("endpoint", item, condition=condition)
                self.outbox.add(tx, event)
        except TransactionFailed as failed:
            if "endpoint" in failed.failed:
                return None
            raise
        return _endpoint(item)

    def delete(self, principal: str, endpoint_id: str) -> bool:
        W, D = self.W, self.D
        if not endpoint_id or not conditionally(
            lambda: W(principal, endpoint_id).delete(condition=W.endpoint_id.exists())
        ):
            return False
        keys = [item.seq for item in D.query(endpoint_id, attributes_to_get=["endpoint_id", "seq"])]
        with D.batch_write() as batch:
            for seq in keys:
                batch.delete(D(endpoint_id, seq))
        return True

    def record(self, endpoint_id: str, entry: FeedEntry, attempt: Attempt) -> None:
        D = self.D
        as_json = json.dumps(asdict(attempt), separators=(",", ":"))
        created = D(
            endpoint_id,
            entry.seq,
            event_id=entry.event.event_id,
            type=entry.event.type.value,
            attempts=[as_json],
            expires_at=int(entry.event.time + RETENTION_S),
        )
        if conditionally(lambda: created.save(condition=D.seq.does_not_exist())):
            return
        single_write(lambda: D(endpoint_id, entry.seq).update(actions=[D.attempts.set(D.attempts.append([as_json]))]))

    def deliveries(self, endpoint_id: str, before: int | None, limit: int) -> list[WebhookDelivery]:
        D = self.D
        condition = D.seq < before if before is not None else None
        items = D.query(endpoint_id, condition, scan_index_forward=False, limit=limit, consistent_read=True)
        return [
            WebhookDelivery(
                endpoint_id=item.endpoint_id,
                seq=int(item.seq),
                event_id=item.event_id,
                type=EventType(item.type),
                attempts=tuple(Attempt(**json.loads(str(a))) for a in item.attempts or ()),
            )
            for item in items
        ]


class SecretsManagerWebhookSecrets:
    """One secret per endpoint, `sitedispatch-webhooks/<endpoint id>`: its current signing secret, and during a
    rotation the previous one with the time it stops signing."""

    def __init__(self, client: Any, prefix: str = WEBHOOK_SECRET_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    def _name(self, endpoint_id: str) -> str:
        return self.prefix + endpoint_id

    def _read(self, endpoint_id: str) -> dict[str, Any]:
        try:
            value = self.client.get_secret_value(SecretId=self._name(endpoint_id))["SecretString"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise TransientError(f"webhook secret of {endpoint_id}: {code}", code="secret_unavailable") from None
        return dict(json.loads(value))

    def create(self, endpoint_id: str) -> str:
        secret = new_secret()
        self.client.create_secret(
            Name=self._name(endpoint_id),
            SecretString=json.dumps({"current": secret}),
            Description="sitedispatch: the signing secret of one webhook endpoint",
        )
        return secret

    def signing(self, endpoint_id: str, now: float) -> list[str]:
        value = self._read(endpoint_id)
        return signing_secrets(value["current"], value.get("previous"), float(value.get("previous_until") or 0), now)

    def rotate(self, endpoint_id: str, now: float) -> tuple[str, float]:
        current = self._read(endpoint_id)["current"]
        secret, until = new_secret(), now + ROTATION_OVERLAP_S
        value = {"current": secret, "previous": current, "previous_until": until}
        self.client.put_secret_value(SecretId=self._name(endpoint_id), SecretString=json.dumps(value))
        return secret, until

    def delete(self, endpoint_id: str) -> None:
        try:
            self.client.delete_secret(SecretId=self._name(endpoint_id), ForceDeleteWithoutRecovery=True)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise


class SqsWebhookQueue:
    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.url = url

    def send(self, message: WebhookMessage) -> None:
        dedup = hashlib.sha256(f"{message.endpoint_id}:{message.reason}".encode()).hexdigest()
        self.client.send_message(
            QueueUrl=self.url,
            MessageBody=message.to_body(),
            MessageGroupId=message.endpoint_id,
            MessageDeduplicationId=dedup,
        )
