"""Test data factories: settings, events and inputs built one way everywhere."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from sitedispatch.domain.settings import Settings

T = TypeVar("T")


def present(value: T | None) -> T:
    """A value the test expects to exist (an operation, a site) as its type: a failing assertion otherwise."""
    assert value is not None, "expected a value, found None"
    return value


PROVISION = {"title": "Acme Blog", "admin_email": "admin@acme.example"}


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "operations_queue_url": "http://127.0.0.1:1/123456789012/ops.fifo",
        "operations_dlq_url": "http://127.0.0.1:1/123456789012/ops-dlq.fifo",
        "bulk_queue_url": "http://127.0.0.1:1/123456789012/bulk.fifo",
        "bulk_dlq_url": "http://127.0.0.1:1/123456789012/bulk-dlq.fifo",
        "publications_queue_url": "http://127.0.0.1:1/123456789012/pub.fifo",
        "publications_dlq_url": "http://127.0.0.1:1/123456789012/pub-dlq.fifo",
        "events_queue_url": "http://127.0.0.1:1/123456789012/events.fifo",
        "events_dlq_url": "http://127.0.0.1:1/123456789012/events-dlq.fifo",
        "webhooks_queue_url": "http://127.0.0.1:1/123456789012/webhooks.fifo",
        "webhooks_dlq_url": "http://127.0.0.1:1/123456789012/webhooks-dlq.fifo",
        "operations_table": "ops",
        "sites_table": "sites",
        "commits_table": "commits",
        "publications_table": "publications",
        "counters_table": "counters",
        "audit_table": "audit",
        "events_table": "events",
        "feed_table": "feed",
        "webhooks_table": "webhooks",
        "deliveries_table": "deliveries",
        "event_bus": "bus",
        "bucket": "bucket",
    }
    return Settings(**{**base, **overrides})


def sqs_fifo_record(
    body: dict[str, Any] | str, *, group_id: str, message_id: str, receipt: str | None = None, receive_count: int = 1
) -> dict[str, Any]:
    """One record of Lambda's SQS event for a FIFO queue."""
    return {
        "messageId": message_id,
        "receiptHandle": receipt or f"rh-{message_id}",
        "body": body if isinstance(body, str) else json.dumps(body),
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": "1800000000000",
            "SequenceNumber": "1",
            "MessageGroupId": group_id,
            "SenderId": "TEST",
            "MessageDeduplicationId": f"d-{message_id}",
            "ApproximateFirstReceiveTimestamp": "1800000000000",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:sitedispatch-operations.fifo",
        "awsRegion": "us-east-1",
    }
