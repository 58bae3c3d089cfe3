"""HTTP API: API Gateway (IAM authorization) -> one route of the API -> the core. The caller is who API Gateway
verified; what it may see and do is the core's decision (sitedispatch.operator.controls)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.utilities.typing import LambdaContext

from sitedispatch.api.app import body_limit, create_app, refused_before_routing, with_decoded_colons
from sitedispatch.functions.runtime import dependencies, init_phase
from sitedispatch.observability import logger, metrics, tracer


@lru_cache(maxsize=1)
def app() -> APIGatewayHttpResolver:
    """One resolver per process. Powertools keeps the event being resolved on its router class
    (`BaseRouter.current_event`): one request at a time per process, as Lambda runs them (the local gateway gives
    each concurrent request its own process, or serializes them)."""
    return create_app(dependencies)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    refused = refused_before_routing(event, body_limit(dependencies().settings.max_input_bytes))
    if refused is not None:
        return refused
    return app().resolve(with_decoded_colons(event), context)


init_phase(app)  # inside a function's environment: its clients and core, before the first event
