"""Dead letters: list them with their evidence, read one's evidence, redrive (or replay) them."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import NUMBER, SITE_ID, DeadLetterView, RedriveRequest, ReplayRequest
from sitedispatch.api.request import caller, dependencies
from sitedispatch.domain.errors import Conflict, InvalidInput
from sitedispatch.domain.model import Kind
from sitedispatch.operator.access import Caller
from sitedispatch.operator.reads import DeadLetterFilter
from sitedispatch.operator.redrive import RedriveReport

router = Router()


@router.get("/dead-letters", responses=ERRORS, summary="Dead operations with their evidence, newest first")
def dead_letters(
    site_id: Annotated[str | None, Query(pattern=SITE_ID)] = None,
    kind: Annotated[Kind | None, Query()] = None,
    error_code: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
    older_than_s: Annotated[float | None, Field(ge=0), Query(), NUMBER] = None,
    newer_than_s: Annotated[float | None, Field(ge=0), Query(), NUMBER] = None,
    limit: Annotated[int, Field(ge=1, le=10_000), Query(), NUMBER] = 100,
) -> list[DeadLetterView]:
    where = DeadLetterFilter(site_id, kind.value if kind else None, error_code, older_than_s, newer_than_s)
    return [
        DeadLetterView(
            op.operation_id,
            op.site_id,
            op.kind,
            op.principal,
            op.epoch,
            op.attempt,
            op.attempt_budget,
            op.finished_at,
            op.evidence,
        )
        for op in dependencies().controls().dead_letters(caller(), where, limit=limit)
    ]


@router.get("/dead-letters/<operation_id>", responses=ERRORS, summary="The evidence document of a dead operation")
def evidence(operation_id: str) -> dict[str, Any]:
    return dependencies().controls().evidence(caller(), operation_id)


@router.post("/dead-letters/redrive", responses=ERRORS, summary="Queue dead operations again (dry run: what would be)")
def redrive(body: RedriveRequest) -> RedriveReport:
    who = caller()
    if not (body.operation_id or body.site_id or body.error_code or body.all):
        raise InvalidInput("choose operation_id, site_id, error_code or all", field="selection")
    if body.input is not None and body.operation_id is None:
        raise InvalidInput("input replaces one operation's input: give operation_id", field="input")
    where = DeadLetterFilter(site_id=body.site_id, error_code=body.error_code)
    controls = dependencies().controls()
    if body.operation_id is not None:
        op = controls.authorize_action(who, "redrive", body.operation_id, body.reason)
        if not where.matches(op, op.updated_at):  # another selector given that this operation does not match
            return RedriveReport(dry_run=body.dry_run)
        if not body.dry_run:
            return redrive_one(who, body.operation_id, body, "redrive")
    return controls.redrive(
        who,
        operation_id=body.operation_id,
        where=None if body.operation_id else where,
        dry_run=body.dry_run,
        reason=body.reason,
    )


def redrive_one(who: Caller, operation_id: str, body: ReplayRequest, action: str) -> RedriveReport:
    """One dead operation queued again (`redrive`) or in a new attempt epoch (`replay`), with a replacement input if
    the body carries one (stored as the caller's own upload, once the action is allowed)."""
    d = dependencies()
    controls = d.controls()
    op = controls.authorize_action(who, action, operation_id, body.reason)  # before storing a replacement input
    new_input = None
    if body.input is not None:
        new_input = d.submitter().store_input(op.kind, op.site_id, who.identity, body.input)
    report = controls.redrive(who, operation_id=operation_id, new_input=new_input, reason=body.reason, action=action)
    if report.refused:
        raise Conflict(report.refused[operation_id])
    return report
