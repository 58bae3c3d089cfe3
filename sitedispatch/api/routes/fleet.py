"""The fleet as a whole: its status (queues, backlog, estimated delays), and a reconciler sweep run now."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import ReconcileRequest
from sitedispatch.api.request import caller, dependencies
from sitedispatch.domain.errors import Forbidden, InvalidInput
from sitedispatch.operator.status import StatusReport, collect_status
from sitedispatch.reconciler import Sweep

router = Router()


@router.get(
    "/status",
    responses=ERRORS,
    summary="Queue depths and ages, the backlog and estimated delays (a principal's own rows)",
)
def status() -> StatusReport:
    d, who = dependencies(), caller()
    principal = d.controls().visible_principal(who)
    return collect_status(d.sqs, d.settings, d.operations, d.sites, d.pace, d.clock.now(), principal)


@router.post("/reconcile", responses=ERRORS, summary="Run one reconciler sweep now (operators only)")
def reconcile(body: ReconcileRequest) -> Sweep:
    who = caller()
    if not who.operator:
        raise Forbidden(f"{who.identity} may not run sweeps: only operators may")
    sweep = dependencies().reconciler().run(body.schedule)
    if sweep is None:
        raise InvalidInput(f"unknown schedule {body.schedule!r}", field="schedule")
    return sweep
