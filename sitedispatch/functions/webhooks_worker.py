"""Webhooks worker: SQS FIFO (group = endpoint) -> one wake of the endpoint: its due deliveries, in order."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.aws.sqs import SqsVisibility
from sitedispatch.domain.webhooks import WebhookMessage
from sitedispatch.functions.runtime import dependencies, drop_malformed, init_phase
from sitedispatch.observability import logger, metrics, tracer
from sitedispatch.webhooks.deliverer import WebhookDeliverer

FAILED_WAKE_S = (5.0, 30.0)  # a wake that raised (a throttle, a secret unreadable) comes back after this, jittered


@lru_cache(maxsize=1)
def deliverer() -> WebhookDeliverer:
    return dependencies().webhook_deliverer()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """A wake that ends with an attempt due later keeps its message, invisible until then (its endpoint's later
    wakes wait behind it, in its group): reported failed with that visibility. Caught up or disabled: done."""
    failures = []
    for record in SQSEvent(event).records:
        try:
            message = WebhookMessage.from_body(record.body)
        except (ValueError, TypeError, KeyError):
            drop_malformed(record, "webhooks")
            continue
        try:
            wait = deliverer().wake(message).retry_in
        except Exception as exc:
            logger.warning("webhook wake failed: tried again", extra={"error": repr(exc)[:300]})
            wait = random.uniform(*FAILED_WAKE_S)
        if wait is not None:
            deps = dependencies()
            visibility = SqsVisibility(deps.sqs, deps.queue_url_for_arn(record.event_source_arn), record.receipt_handle)
            visibility.change(min(max(1.0, wait), visibility.ceiling_s()))
            failures.append({"itemIdentifier": record.message_id})
    return {"batchItemFailures": failures}


init_phase(deliverer)  # inside a function's environment: its clients and core, before the first event
