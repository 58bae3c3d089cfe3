"""Operations: submit one or a batch, list, read, wait for, cancel and replay."""

from __future__ import annotations

import time
from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS, LISTED, SUBMIT_RESPONSES
from sitedispatch.api.models import (
    NUMBER,
    PRINCIPAL,
    SITE_ID,
    TENANT,
    BatchAnswer,
    BatchItemAnswer,
    BatchRequest,
    OperationDetail,
    ReasonRequest,
    ReplayRequest,
    SubmitRequest,
    SubmittedOperation,
)
from sitedispatch.api.request import CURSOR_QUERY, caller, dependencies, paged
from sitedispatch.api.routes.dead_letters import redrive_one
from sitedispatch.domain.errors import error_document, http_status
from sitedispatch.domain.model import Kind, Operation, Status
from sitedispatch.operations.standing import standing_of
from sitedispatch.operations.submission import Submitted
from sitedispatch.operator.reads import OperationFilter
from sitedispatch.operator.redrive import RedriveReport

router = Router()
MAX_WAIT_S = 20.0  # a long poll well inside API Gateway's 30 s integration timeout
WAIT_POLL_S = 0.5


@router.post("/operations", summary="Submit one operation for a site", responses=SUBMIT_RESPONSES)
def submit(
    body: SubmitRequest,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=256)] = None,
) -> Response[SubmittedOperation]:
    who = caller()
    result = (
        dependencies()
        .submitter()
        .submit(
            kind=body.kind,
            site_id=body.site_id,
            principal=who.identity,
            params=body.params,
            idempotency_key=idempotency_key,
            tenant=body.tenant,
        )
    )
    view = submitted_view(result)
    op = result.operation
    if result.created:
        return Response(
            202, content_types.APPLICATION_JSON, view, headers={"Location": f"/operations/{op.operation_id}"}
        )
    return Response(200, content_types.APPLICATION_JSON, view)


@router.post(
    "/operations/batch",
    responses=ERRORS,
    summary="Submit up to 500 operations, answered item by item as single submits would be",
)
def submit_batch(body: BatchRequest) -> BatchAnswer:
    from sitedispatch.operations.batch import BatchItem, BatchSubmitter

    who = caller()
    items = [BatchItem(item.kind, item.site_id, item.idempotency_key, item.params, item.tenant) for item in body.items]
    answers = BatchSubmitter(dependencies().submitter()).submit(who.identity, items)
    views = []
    for index, answer in enumerate(answers):
        if answer.submitted is not None:
            status = 202 if answer.submitted.created else 200
            views.append(BatchItemAnswer(index, status, operation=submitted_view(answer.submitted)))
        else:
            assert answer.error is not None
            views.append(BatchItemAnswer(index, http_status(answer.error), error=error_document(answer.error)))
    statuses = [view.status for view in views]
    return BatchAnswer(
        statuses.count(202), statuses.count(200), len(views) - statuses.count(202) - statuses.count(200), views
    )


@router.get(
    "/operations",
    responses=LISTED,
    summary="A page of operations (a principal's own): a site's or a status's newest first, else in table order",
)
def list_operations(
    site_id: Annotated[str | None, Query(pattern=SITE_ID)] = None,
    status: Annotated[Status | None, Query()] = None,
    kind: Annotated[Kind | None, Query()] = None,
    principal: Annotated[str | None, Query(pattern=PRINCIPAL, description="whose (operators and readers)")] = None,
    tenant: Annotated[str | None, Query(pattern=TENANT, description="the fairness key")] = None,
    error_code: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
    newer_than_s: Annotated[
        float | None, Field(ge=0), Query(description="created at most this long ago"), NUMBER
    ] = None,
    cursor: Annotated[str | None, CURSOR_QUERY] = None,
    limit: Annotated[int, Field(ge=1, le=10_000), Query(), NUMBER] = 50,
) -> Response[list[Operation]]:
    where = OperationFilter(kind and kind.value, principal, tenant, error_code, newer_than_s)
    page = (
        dependencies()
        .controls()
        .operations(caller(), site_id=site_id, status=status, where=where, limit=limit, cursor=cursor)
    )
    return paged(page, "/operations")


@router.get(
    "/operations/<operation_id>", responses=ERRORS, summary="One operation (a waiting one with its estimated delay)"
)
def get_operation(operation_id: str) -> OperationDetail:
    return detail(dependencies().controls().operation(caller(), operation_id))


@router.get(
    "/operations/<operation_id>/wait",
    responses=ERRORS,
    summary="Long poll: the operation once terminal, or at the timeout",
)
def wait_operation(
    operation_id: str, timeout_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S), Query(), NUMBER] = MAX_WAIT_S
) -> OperationDetail:
    who, controls = caller(), dependencies().controls()
    deadline = time.monotonic() + timeout_s
    op = controls.operation(who, operation_id)
    while not op.status.terminal and time.monotonic() < deadline:
        time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
        op = controls.operation(who, operation_id)
    return detail(op)


@router.post(
    "/operations/<operation_id>/cancel",
    responses=ERRORS,
    summary="Cancel a queued operation, or a running one cooperatively",
)
def cancel_operation(operation_id: str, body: ReasonRequest) -> Operation:
    return dependencies().controls().cancel(caller(), operation_id, body.reason)


@router.post(
    "/operations/<operation_id>/replay", responses=ERRORS, summary="Replay a dead operation in a new attempt epoch"
)
def replay_operation(operation_id: str, body: ReplayRequest) -> RedriveReport:
    return redrive_one(caller(), operation_id, body, "replay")


def detail(op: Operation) -> OperationDetail:
    d = dependencies()
    standing = standing_of(op, d.operations, d.sites, d.pace, d.settings, d.clock.now(), d.dependency_store)
    started = op.result.get("publication") if op.status == Status.SUCCEEDED else None
    return OperationDetail.of(
        op,
        estimated_delay_s=standing.estimate.delay_s if standing.estimate else None,
        estimate=standing.estimate,
        waiting_because=standing.waiting_because,
        progress=standing.progress,
        publication=d.publications.get(op.site_id, int(started["seq"])) if started else None,
    )


def submitted_view(result: Submitted) -> SubmittedOperation:
    op = result.operation
    return SubmittedOperation(op.operation_id, op.site_id, op.kind, op.status.value, result.created, op.input_digest)
