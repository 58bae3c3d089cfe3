"""Events worker: SQS FIFO (group = principal) -> each event's place in its principal's feed -> the event bus."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.aws.sqs import SqsVisibility
from sitedispatch.domain.events import EventMessage
from sitedispatch.events.worker import EventsWorker
from sitedispatch.functions.runtime import dependencies, drop_malformed, init_phase
from sitedispatch.observability import logger, metrics, tracer

RETRY_S = 3.0  # the widest backoff of a failed events batch (jittered from 1 s)


@lru_cache(maxsize=1)
def worker() -> EventsWorker:
    return dependencies().events_worker()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The whole batch at once (one feed append per principal in it). A failure fails the whole batch, each
    message back after a short backoff rather than the queue's visibility timeout: every step is safe to repeat,
    and no record is reported failed alone (its group's later events wait behind it, in order)."""
    records, messages = list(SQSEvent(event).records), []
    for record in records:
        try:
            messages.append(EventMessage.from_body(record.body))
        except (ValueError, TypeError, KeyError):
            drop_malformed(record, "events")
    try:
        placed = worker().process(messages)
    except Exception as exc:  # a throttle, a conflict past its patience, the bus refusing: the batch again, soon
        logger.warning("events batch failed: delivered again", extra={"error": repr(exc)[:300]})
        deps = dependencies()
        for record in records:
            url = deps.queue_url_for_arn(record.event_source_arn)
            SqsVisibility(deps.sqs, url, record.receipt_handle).change(random.uniform(1.0, RETRY_S))
        return {"batchItemFailures": [{"itemIdentifier": record.message_id} for record in records]}
    return {"batchItemFailures": [], "placed": placed}


init_phase(worker)  # inside a function's environment: its clients and core, before the first event
