"""Publication worker: SQS FIFO (group = one chunk) -> render and store routes -> fan-in -> receipt -> promotion."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import dependencies
from sitedispatch.model import PublicationMessage
from sitedispatch.observability import count, logger, metrics, tracer
from sitedispatch.publication.worker import PublicationWorker

processor = SqsFifoPartialProcessor(skip_group_on_error=True)
processor.raise_on_entire_batch_failure = False  # a failed chunk is retried by redelivery, not an invocation error


@lru_cache(maxsize=1)
def worker() -> PublicationWorker:
    return dependencies().publication_worker()


def warm() -> None:
    """Build clients and the worker ahead of the first event (what provisioned concurrency does on AWS)."""
    dependencies().warm()
    worker()


@tracer.capture_method
def record_handler(record: SQSRecord) -> dict[str, Any]:
    try:
        message = PublicationMessage.from_body(record.body)
    except (ValueError, TypeError, KeyError):
        count("MalformedMessage")
        logger.error("malformed publications message dropped", extra={"message_id": record.message_id,
                                                                      "body_prefix": record.body[:200]})
        return {"outcome": "malformed"}
    result = worker().process(message)
    return {"outcome": result.outcome.value, "reason": result.reason}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
