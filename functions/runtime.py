"""Per-container dependencies, built on first use (no client at import, so imports stay cheap for tests)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.settings import Settings
from sitedispatch.observability import count, logger

if TYPE_CHECKING:  # the queue consumers import the batch utility; the API and the reconciler never need it
    from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


@lru_cache(maxsize=1)
def dependencies() -> Dependencies:
    return Dependencies(Settings())  # fields come from the environment


def fifo_processor() -> SqsFifoPartialProcessor:
    """skip_group_on_error: a failing group never fails another group's records in the same batch. A batch whose
    every record failed (all deferred, say) is not an invocation error either (no Lambda error metric, no alarm): the
    records are reported as failures and the handler returns normally. The FIFO processor's constructor does not
    take that flag, hence the attribute."""
    from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor

    processor = SqsFifoPartialProcessor(skip_group_on_error=True)
    processor.raise_on_entire_batch_failure = False
    return processor


def drop_malformed(record: SQSRecord, queue: str) -> dict[str, Any]:
    """A body that names no durable state cannot be linked to anything: acknowledge it loudly rather than let it
    poison its group."""
    count("MalformedMessage")
    logger.error(
        f"malformed {queue} message dropped", extra={"message_id": record.message_id, "body_prefix": record.body[:200]}
    )
    return {"outcome": "malformed"}
