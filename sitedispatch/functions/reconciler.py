"""Reconciler: invoked by EventBridge Scheduler with {"schedule": NAME}; dispatches by name."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.domain.resources import SCHEDULES
from sitedispatch.functions.runtime import dependencies, init_phase
from sitedispatch.observability import logger, metrics, tracer


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    schedule = str(event.get("schedule", ""))
    if schedule not in SCHEDULES:  # refused before any client is built (the Reconciler would refuse it too)
        logger.warning("unknown schedule skipped", extra={"schedule": schedule})
        return {"schedule": schedule, "skipped": True, "repaired": {}, "truncated": False, "failed": []}
    sweep = dependencies().reconciler().run(schedule)
    return {
        "schedule": schedule,
        "skipped": sweep is None,
        "repaired": sweep.repaired if sweep else {},
        "truncated": bool(sweep and sweep.truncated),
        "failed": sweep.failed if sweep else [],
    }


init_phase()  # inside a function's environment: its clients and core, before the first event
