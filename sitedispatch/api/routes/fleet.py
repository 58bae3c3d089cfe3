"""The fleet as a whole: its status (queues, backlog, estimated delays), and a reconciler sweep run now."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import NUMBER, ReconcileRequest
from sitedispatch.api.request import caller, dependencies
from sitedispatch.domain.errors import Forbidden, InvalidInput
from sitedispatch.flow.minute_counts import KEEP_MINUTES
from sitedispatch.flow.outcomes import MinuteOutcomes
from sitedispatch.operator.status import StatusReport, collect_status
from sitedispatch.reconciler import Sweep

router = Router()


@dataclass(frozen=True)
class FleetMinutes:
    minutes: list[MinuteOutcomes]


@router.get(
    "/status",
    responses=ERRORS,
    summary="Queue depths and ages, the backlog and estimated delays (a principal's own rows)",
)
def status(
    sites: Annotated[
        bool, Query(description="the busiest sites and their delays too (a counter read per site with work)")
    ] = True,
) -> StatusReport:
    d, who = dependencies(), caller()
    controls = d.controls()
    principal = controls.visible_principal(who)
    report = collect_status(d.sqs, d.settings, d.operations, d.sites, d.pace, d.clock.now(), principal, sites)
    return replace(report, dependencies=controls.dependency_rows(who))


@router.get(
    "/status/minutes",
    responses=ERRORS,
    summary="The fleet's attempts, retries, successes and deaths per minute, oldest first (operators and readers)",
)
def minutes(
    minutes: Annotated[
        int, Field(ge=1, le=KEEP_MINUTES), Query(description="how many, the current one included"), NUMBER
    ] = KEEP_MINUTES,
) -> FleetMinutes:
    d, who = dependencies(), caller()
    if not who.sees_all:  # counts of every principal's work together: not one principal's to read
        raise Forbidden(f"{who.identity} may not read the fleet's counts: only operators and readers may")
    return FleetMinutes(d.outcomes.last(d.clock.now(), minutes))


@router.post("/reconcile", responses=ERRORS, summary="Run one reconciler sweep now (operators only)")
def reconcile(body: ReconcileRequest) -> Sweep:
    who = caller()
    if not who.operator:
        raise Forbidden(f"{who.identity} may not run sweeps: only operators may")
    sweep = dependencies().reconciler().run(body.schedule)
    if sweep is None:
        raise InvalidInput(f"unknown schedule {body.schedule!r}", field="schedule")
    return sweep
