"""Dependencies: what sites share (a database cluster, a PHP pool), each with an operator's cap, rates and breaker;
read by whoever's sites name one, set, paused and resumed by operators."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import DEPENDENCY, NOT_BLANK, REASON_CHARS, DependencyRequest, RequiredReasonRequest
from sitedispatch.api.request import caller, dependencies
from sitedispatch.operator.dependencies import DependencyView, rate_of

router = Router()
DependencyId = Annotated[str, Path(pattern=DEPENDENCY, description="TYPE:NAME, e.g. db:cluster-7")]


@router.get("/dependencies", responses=ERRORS, summary="The dependencies the caller's sites name (operators: all)")
def list_dependencies() -> list[DependencyView]:
    return dependencies().controls().dependencies(caller())


@router.get(
    "/dependencies/<dependency_id>", responses=ERRORS, summary="A dependency: cap, rates, breaker, running, sites"
)
def get_dependency(dependency_id: DependencyId) -> DependencyView:
    return dependencies().controls().dependency(caller(), dependency_id)


@router.put(
    "/dependencies/<dependency_id>",
    responses=ERRORS,
    summary="Set a dependency's cap and rates (operators only; replaces what was set)",
)
def set_dependency(dependency_id: DependencyId, body: DependencyRequest) -> DependencyView:
    rates = tuple(rate_of(r.kind, r.limit, r.period_s, r.burst) for r in body.rates)
    return dependencies().controls().set_dependency(caller(), dependency_id, body.max_running, rates, body.reason)


@router.delete(
    "/dependencies/<dependency_id>",
    responses=ERRORS,
    summary="Remove a dependency's cap and rates (operators only; its breaker as it is)",
)
def clear_dependency(
    dependency_id: DependencyId, reason: Annotated[str, Query(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK)]
) -> DependencyView:
    return dependencies().controls().clear_dependency(caller(), dependency_id, reason)


@router.post(
    "/dependencies/<dependency_id>/pause",
    responses=ERRORS,
    summary="Pause a dependency: nothing on it starts, no attempt spent (operators only)",
)
def pause_dependency(dependency_id: DependencyId, body: RequiredReasonRequest) -> DependencyView:
    return dependencies().controls().set_dependency_paused(caller(), dependency_id, True, body.reason)


@router.post(
    "/dependencies/<dependency_id>/resume",
    responses=ERRORS,
    summary="Resume a paused dependency, or close its open breaker (operators only)",
)
def resume_dependency(dependency_id: DependencyId, body: RequiredReasonRequest) -> DependencyView:
    return dependencies().controls().set_dependency_paused(caller(), dependency_id, False, body.reason)
