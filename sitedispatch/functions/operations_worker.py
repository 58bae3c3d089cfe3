"""Operations worker: SQS FIFO (group = site id) -> one operation per record -> fenced commit."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.aws.sqs import SqsVisibility
from sitedispatch.domain.delivery import Result
from sitedispatch.domain.model import QueueMessage
from sitedispatch.functions.runtime import deadline_of, dependencies, drop_malformed, fifo_processor, init_phase
from sitedispatch.observability import logger, metrics, tracer
from sitedispatch.operations.worker import OperationsWorker

processor = fifo_processor()  # one failing site never fails another site's messages in the same batch


class NotDone(Exception):
    """The record is reported as a batch item failure: it stays in the queue with the visibility the core set."""

    def __init__(self, result: Result) -> None:
        super().__init__(f"{result.outcome.value}: {result.reason} (back in {result.delay_s:.1f}s)")


@lru_cache(maxsize=1)
def worker() -> OperationsWorker:
    return dependencies().worker()


def parse_message(body: str) -> QueueMessage | None:
    """The message a body is, or None: a JSON object naming an operation and a site (non-empty strings), with its
    routing fields as strings if present."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    operation_id, site_id = data.get("operation_id"), data.get("site_id")
    routing = [data.get(name, "") for name in ("principal", "lane", "tenant", "deps")]
    if not (isinstance(operation_id, str) and operation_id and isinstance(site_id, str) and site_id):
        return None
    if not all(isinstance(value, str) for value in routing):
        return None
    return QueueMessage(operation_id, site_id, *routing)


@tracer.capture_method
def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> dict[str, Any]:
    message = parse_message(record.body)
    if message is None:
        return drop_malformed(record, "operations")
    deps = dependencies()
    visibility = SqsVisibility(deps.sqs, deps.queue_url_for_arn(record.event_source_arn), record.receipt_handle)
    try:
        result = worker().process(
            message,
            visibility,
            request_id=getattr(lambda_context, "aws_request_id", ""),
            deadline=deadline_of(lambda_context),
            receive_count=int(record.attributes.approximate_receive_count or 1),
        )
    except Exception:
        # The core answers every outcome it knows with a Result; anything else is a bug or an outage, and the batch
        # processor would report it as a batch item failure without a word: say what it was, then let it do that.
        logger.exception("delivery failed outside the core's outcomes")
        raise
    if not result.outcome.delete_message:
        raise NotDone(result)
    return {"outcome": result.outcome.value, "reason": result.reason}


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)


init_phase(worker)  # inside a function's environment: its clients and core, before the first event
