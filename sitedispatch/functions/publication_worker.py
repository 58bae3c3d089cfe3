"""Publication worker: SQS FIFO (group = one chunk) -> render and store routes -> fan-in -> receipt -> promotion."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.aws.sqs import SqsVisibility
from sitedispatch.domain.model import PublicationMessage
from sitedispatch.functions.runtime import deadline_of, dependencies, drop_malformed, fifo_processor, init_phase
from sitedispatch.observability import logger, metrics, tracer
from sitedispatch.publication.worker import PublicationWorker

processor = fifo_processor()  # a failed chunk is retried by redelivery, never blocking another chunk


@lru_cache(maxsize=1)
def worker() -> PublicationWorker:
    return dependencies().publication_worker()


@tracer.capture_method
def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
    try:
        message = PublicationMessage.from_body(record.body)
    except (ValueError, TypeError, KeyError):
        return drop_malformed(record, "publications")
    deps = dependencies()
    visibility = SqsVisibility(deps.sqs, deps.queue_url_for_arn(record.event_source_arn), record.receipt_handle)
    receive_count = int(record.attributes.approximate_receive_count or 1)
    result = worker().process(message, visibility, receive_count, deadline_of(lambda_context))
    return {"outcome": result.outcome.value, "reason": result.reason}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)


init_phase(worker)  # inside a function's environment: its clients and core, before the first event
