"""Events worker: SQS FIFO (group = principal) -> each event's place in its principal's feed -> the event bus."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.domain.events import EventMessage
from sitedispatch.events.worker import EventsWorker
from sitedispatch.functions.runtime import dependencies, drop_malformed, init_phase
from sitedispatch.observability import logger, metrics, tracer


@lru_cache(maxsize=1)
def worker() -> EventsWorker:
    return dependencies().events_worker()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The whole batch at once (one feed append per principal in it). A failure raises: Lambda delivers the batch
    again, in order, and every step is safe to repeat; no record is reported failed alone, since a later event of a
    principal must not take a feed place before an earlier one."""
    messages = []
    for record in SQSEvent(event).records:
        try:
            messages.append(EventMessage.from_body(record.body))
        except (ValueError, TypeError, KeyError):
            drop_malformed(record, "events")
    placed = worker().process(messages)
    return {"batchItemFailures": [], "placed": placed}


init_phase(worker)  # inside a function's environment: its clients and core, before the first event
