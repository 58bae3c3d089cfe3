"""Per-container dependencies: built in Lambda's init phase inside a function's environment, on first use anywhere
else (an import by a test or a tool builds no client)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.resources import LAMBDA_FUNCTION_NAME_ENV
from sitedispatch.domain.settings import Settings
from sitedispatch.observability import Metric, count, logger

if TYPE_CHECKING:  # the queue consumers import the batch utility; the API and the reconciler never need it
    from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext


def deadline_of(context: LambdaContext | None) -> float | None:
    """When the invocation is stopped (the function's timeout), in the clock's time."""
    if context is None:
        return None
    return time.time() + context.get_remaining_time_in_millis() / 1000


@lru_cache(maxsize=1)
def dependencies() -> Dependencies:
    return Dependencies(Settings())  # fields come from the environment


def init_phase(*prepare: Callable[[], object]) -> None:
    """Lambda's init phase: a function's module calls this at import, so inside an execution environment the clients
    (and what `prepare` builds: the function's core) exist before the first event, as AWS advises ("initialize SDK
    clients outside of the function handler"). Ten environments started at once then spend their first event on
    the event, not on building clients: on AWS each environment has its own CPU for its init; the local runtime
    runs it once before forking its environments, since it makes no request (`Dependencies.clients`)."""
    if not os.environ.get(LAMBDA_FUNCTION_NAME_ENV):
        return
    dependencies().clients()
    for step in prepare:
        step()


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
    count(Metric.MalformedMessage)
    logger.error(
        f"malformed {queue} message dropped", extra={"message_id": record.message_id, "body_prefix": record.body[:200]}
    )
    return {"outcome": "malformed"}
