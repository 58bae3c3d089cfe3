"""A delivery's body and its Standard Webhooks headers, signed by the `standardwebhooks` package (the
specification's reference implementation): `v1,` HMAC-SHA256 over `id.timestamp.body`, one signature per secret
in use (two during a rotation, separated by a space, as the specification allows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from sitedispatch.domain.events import Event

USER_AGENT = "sitedispatch-webhooks/1"


def payload(event: Event, seq: int) -> bytes:
    """The body: Standard Webhooks' envelope (type, timestamp, data), the data being the event as the feed has it."""
    envelope = {
        "type": event.type.value,
        "timestamp": datetime.fromtimestamp(event.time, UTC).isoformat().replace("+00:00", "Z"),
        "data": event.wire(seq),
    }
    return json.dumps(envelope, separators=(",", ":"), sort_keys=True).encode()


def signed_headers(event_id: str, sent_at: float, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    if not secrets:
        raise ValueError("a delivery is signed with at least one secret")
    timestamp = datetime.fromtimestamp(int(sent_at), UTC)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(int(sent_at)),
        "webhook-signature": " ".join(Webhook(secret).sign(event_id, timestamp, body) for secret in secrets),
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }
