"""The HTTP API: every producer and operator action as a route, behind API Gateway's IAM (SigV4) authorization.

Who calls is what API Gateway verified (`requestContext.authorizer.iam.userArn`), never anything in the request;
what the caller may see or do is decided by the core (`operator.controls`, `operations.submission`), never here.
This module only translates HTTP to the core's calls and the core's answers and errors back to HTTP:

    202 + Location   a new operation            200   the same submit again (same key, same input)
    400              a body that is not JSON    422   a field that is wrong (named in `field`)
    404              missing, or another tenant's (the two are indistinguishable)
    403              what only operators may do, or an unsigned request
    409              an idempotency or state conflict
    413              a body over the route's limit
    429 + Retry-After  backpressure (`retry_after_s`, `estimated_delay_s`, the limit and its value in the body)

Every error body is `ErrorBody` (written by `sitedispatch.domain.errors.error_document`), in the OpenAPI document
for every route.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from pydantic import Field

from sitedispatch import observability as obs
from sitedispatch.api.models import (
    NOT_BLANK,
    NUMBER,
    PRINCIPAL,
    REASON_CHARS,
    SITE_ID,
    TENANT,
    BatchAnswer,
    BatchItemAnswer,
    BatchRequest,
    DeadLetterView,
    OperationDetail,
    QuotaRequest,
    ReasonRequest,
    ReconcileRequest,
    RedriveRequest,
    RegisterSiteRequest,
    ReplayRequest,
    SubmitRequest,
    SubmittedOperation,
    UploadRequest,
    error_responses,
)
from sitedispatch.domain.errors import (
    Backpressure,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    NotJson,
    NotJsonMediaType,
    SiteDispatchError,
    TooLarge,
    error_document,
    http_status,
)
from sitedispatch.domain.model import AuditEntry, Kind, Operation, Site, SiteConnection, Status, stable_identity
from sitedispatch.operations.submission import Submitted
from sitedispatch.operations.uploads import UploadGrant, grant_upload
from sitedispatch.operator.controls import (
    Caller,
    DeadLetterFilter,
    LiveRoute,
    PrincipalLimits,
    RedriveReport,
    SiteHistory,
)
from sitedispatch.operator.status import StatusReport, collect_status
from sitedispatch.reconciler import Sweep

if TYPE_CHECKING:
    from sitedispatch.dependencies import Dependencies

API_TITLE = "sitedispatch"
API_VERSION = "1"
# What only operators may call: the producer policy does not grant these routes at all (and the core refuses them).
OPERATOR_ROUTES = frozenset({("PUT", "/quotas"), ("DELETE", "/quotas"), ("POST", "/reconcile")})
MAX_WAIT_S = 20.0  # a long poll well inside API Gateway's 30 s integration timeout
# The audit log is read one day partition at a time: a bounded look back bounds the reads of one request.
MAX_AUDIT_S = 90 * 86_400
WAIT_POLL_S = 0.5
BODY_OVERHEAD_BYTES = 16 * 1024  # a submit's envelope around its input
ERRORS = error_responses()
SUBMIT_RESPONSES = {
    **ERRORS,
    200: {"description": "the same submit again (same key, same input): the existing operation"},
    202: {"description": "accepted: a new operation (Location names it)"},
}


def error_response(exc: SiteDispatchError) -> Response[Any]:
    headers = {}
    if isinstance(exc, Backpressure):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return Response(http_status(exc), content_types.APPLICATION_JSON, error_document(exc), headers=headers)


def _field_of(error: dict[str, Any]) -> str | None:
    where = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path", "header")]
    return ".".join(where) or None


def create_app(deps: Callable[[], Dependencies]) -> APIGatewayHttpResolver:  # noqa: C901  (one closure per route)
    app = APIGatewayHttpResolver(enable_validation=True)

    def caller() -> Caller:
        iam = app.current_event.request_context.authorizer.iam
        arn = iam.user_arn if iam is not None else None
        if not arn:
            raise Forbidden("the request is not signed: sign it with SigV4 (service execute-api)")
        return Caller.of(stable_identity(arn), deps().settings)

    @app.exception_handler(SiteDispatchError)
    def refused(exc: SiteDispatchError) -> Response[Any]:
        if http_status(exc) >= 500:
            obs.logger.exception("request failed", extra={"error_code": exc.code})
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    def invalid(exc: RequestValidationError) -> Response[Any]:
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return error_response(NotJson("the body is not a JSON document", field="body"))
        name = _field_of(first)
        message = f"{name}: {first.get('msg', 'invalid')}" if name else str(first.get("msg", "invalid request"))
        return error_response(InvalidInput(message, field=name))

    @app.not_found
    def no_route(_: Exception) -> Response[Any]:
        event = app.current_event
        return error_response(NotFound(f"no route {event.http_method} {event.path}"))

    # -- operations -----------------------------------------------------------------------------------------

    @app.post("/operations", summary="Submit one operation for a site", responses=SUBMIT_RESPONSES)
    def submit(
        body: SubmitRequest,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=256)] = None,
    ) -> Response[SubmittedOperation]:
        who = caller()
        result = (
            deps()
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

    @app.post(
        "/operations/batch",
        responses=ERRORS,
        summary="Submit up to 500 operations, answered item by item as single submits would be",
    )
    def submit_batch(body: BatchRequest) -> BatchAnswer:
        from sitedispatch.operations.batch import BatchItem, BatchSubmitter

        who = caller()
        items = [
            BatchItem(item.kind, item.site_id, item.idempotency_key, item.params, item.tenant) for item in body.items
        ]
        answers = BatchSubmitter(deps().submitter()).submit(who.identity, items)
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

    @app.get("/operations", responses=ERRORS, summary="List operations, newest first (a principal's own)")
    def list_operations(
        site_id: Annotated[str | None, Query(pattern=SITE_ID)] = None,
        status: Annotated[Status | None, Query()] = None,
        limit: Annotated[int, Field(ge=1, le=10_000), Query(), NUMBER] = 50,
    ) -> list[Operation]:
        return deps().controls().operations(caller(), site_id=site_id, status=status, limit=limit)

    def detail(op: Operation) -> OperationDetail:
        from sitedispatch.flow.estimates import estimated_delay_for
        from sitedispatch.operations.progress import Progress

        if op.status.terminal:
            return OperationDetail.of(op)
        progress = Progress.of(op.checkpoint)
        if op.status == Status.RUNNING:
            return OperationDetail.of(op, progress=progress)
        d = deps()
        site = d.sites.get(op.site_id)
        if site is not None and site.paused:
            return OperationDetail.of(
                op, waiting_because=f"paused: {site.pause_reason or 'no reason given'}", progress=progress
            )
        estimate = estimated_delay_for(op, d.operations, d.sites, d.pace, d.settings, d.clock.now())
        return OperationDetail.of(op, estimated_delay_s=estimate.delay_s, estimate=estimate, progress=progress)

    @app.get(
        "/operations/<operation_id>", responses=ERRORS, summary="One operation (a waiting one with its estimated delay)"
    )
    def get_operation(operation_id: str) -> OperationDetail:
        return detail(deps().controls().operation(caller(), operation_id))

    @app.get(
        "/operations/<operation_id>/wait",
        responses=ERRORS,
        summary="Long poll: the operation once terminal, or at the timeout",
    )
    def wait_operation(
        operation_id: str, timeout_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S), Query(), NUMBER] = MAX_WAIT_S
    ) -> OperationDetail:
        who, controls = caller(), deps().controls()
        deadline = time.monotonic() + timeout_s
        op = controls.operation(who, operation_id)
        while not op.status.terminal and time.monotonic() < deadline:
            time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
            op = controls.operation(who, operation_id)
        return detail(op)

    @app.post(
        "/operations/<operation_id>/cancel",
        responses=ERRORS,
        summary="Cancel a queued operation, or a running one cooperatively",
    )
    def cancel_operation(operation_id: str, body: ReasonRequest) -> Operation:
        return deps().controls().cancel(caller(), operation_id, body.reason)

    def staged(who: Caller, operation_id: str, new_input: dict[str, Any] | None) -> tuple[str, str] | None:
        if new_input is None:
            return None
        d = deps()
        op = d.controls().operation(who, operation_id)
        return d.submitter().store_input(op.kind, op.site_id, who.identity, new_input)  # the caller's own upload

    @app.post(
        "/operations/<operation_id>/replay", responses=ERRORS, summary="Replay a dead operation in a new attempt epoch"
    )
    def replay_operation(operation_id: str, body: ReplayRequest) -> RedriveReport:
        return redrive_one(caller(), operation_id, body, "replay")

    def redrive_one(who: Caller, operation_id: str, body: ReplayRequest, action: str) -> RedriveReport:
        controls = deps().controls()
        controls.authorize_action(who, action, operation_id, body.reason)  # before storing a replacement input
        report = controls.redrive(
            who,
            operation_id=operation_id,
            new_input=staged(who, operation_id, body.input),
            reason=body.reason,
            action=action,
        )
        if report.refused:
            raise Conflict(report.refused[operation_id])
        return report

    # -- sites ------------------------------------------------------------------------------------------------

    @app.post("/sites", responses=ERRORS, summary="Register a site with its driver, before its first operation")
    def register_site(body: RegisterSiteRequest) -> Site:
        connection = SiteConnection(body.driver, body.url, body.credential)
        return deps().submitter().register_site(body.site_id, caller().identity, connection)

    @app.get("/sites/<site_id>", responses=ERRORS, summary="A site: owner, head, lease, fence, pause")
    def get_site(site_id: str) -> Site:
        return deps().controls().site(caller(), site_id)

    @app.get("/sites/<site_id>/history", responses=ERRORS, summary="The site's commits and publications, newest first")
    def site_history(site_id: str, limit: Annotated[int, Field(ge=1, le=1000), Query(), NUMBER] = 50) -> SiteHistory:
        return deps().controls().history(caller(), site_id, limit)

    @app.get("/sites/<site_id>/live", responses=ERRORS, summary="The live content of one route of the site")
    def live_route(site_id: str, route: Annotated[str, Query(max_length=2048)] = "/") -> LiveRoute:
        return deps().controls().live_route(caller(), site_id, route)

    @app.post(
        "/sites/<site_id>/pause", responses=ERRORS, summary="Pause a site: its queued operations wait, no attempt spent"
    )
    def pause_site(site_id: str, body: ReasonRequest) -> Site:
        return deps().controls().set_paused(caller(), site_id, True, body.reason or "paused by operator")

    @app.post("/sites/<site_id>/resume", responses=ERRORS, summary="Resume a paused site")
    def resume_site(site_id: str, body: ReasonRequest) -> Site:
        return deps().controls().set_paused(caller(), site_id, False, body.reason or None)

    # -- dead letters -----------------------------------------------------------------------------------------

    @app.get("/dead-letters", responses=ERRORS, summary="Dead operations with their evidence, newest first")
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
            for op in deps().controls().dead_letters(caller(), where, limit=limit)
        ]

    @app.get("/dead-letters/<operation_id>", responses=ERRORS, summary="The evidence document of a dead operation")
    def evidence(operation_id: str) -> dict[str, Any]:
        return deps().controls().evidence(caller(), operation_id)

    @app.post("/dead-letters/redrive", responses=ERRORS, summary="Queue dead operations again (dry run: what would be)")
    def redrive(body: RedriveRequest) -> RedriveReport:
        who = caller()
        if not (body.operation_id or body.site_id or body.error_code or body.all):
            raise InvalidInput("choose operation_id, site_id, error_code or all", field="selection")
        if body.input is not None and body.operation_id is None:
            raise InvalidInput("input replaces one operation's input: give operation_id", field="input")
        where = DeadLetterFilter(site_id=body.site_id, error_code=body.error_code)
        controls = deps().controls()
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

    # -- audit, quotas, status, uploads, reconcile --------------------------------------------------------------

    @app.get("/audit", responses=ERRORS, summary="Audit entries, newest first (a principal's own actions)")
    def audit(
        since_s: Annotated[
            float, Field(ge=0, le=MAX_AUDIT_S), Query(description="how far back, in seconds"), NUMBER
        ] = 86_400.0,
        actor: Annotated[str | None, Query(pattern=PRINCIPAL)] = None,
        action: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
        target: Annotated[str | None, Query(min_length=1, max_length=300)] = None,
        site_id: Annotated[str | None, Query(pattern=SITE_ID)] = None,
        limit: Annotated[int, Field(ge=1, le=10_000), Query(), NUMBER] = 100,
    ) -> list[AuditEntry]:
        d = deps()
        return d.controls().audit_entries(
            caller(),
            d.clock.now() - since_s,
            actor=actor,
            action=action,
            target=target,
            site_id=site_id,
            limit=limit,
        )

    @app.get("/quotas", responses=ERRORS, summary="A principal's (or one of its tenants') limits and their use")
    def get_quota(
        principal: Annotated[str | None, Query(pattern=PRINCIPAL)] = None,
        tenant: Annotated[str | None, Query(pattern=TENANT)] = None,
    ) -> PrincipalLimits:
        who = caller()
        return deps().controls().limits(who, principal or who.identity, tenant)

    @app.put("/quotas", responses=ERRORS, summary="Override a principal's limits (operators only)")
    def set_quota(body: QuotaRequest) -> PrincipalLimits:
        return (
            deps()
            .controls()
            .set_quota(
                caller(),
                body.principal,
                max_outstanding=body.max_outstanding,
                max_running=body.max_running,
                reason=body.reason,
                tenant=body.tenant,
            )
        )

    @app.delete("/quotas", responses=ERRORS, summary="Remove a principal's override (operators only)")
    def clear_quota(
        principal: Annotated[str, Query(pattern=PRINCIPAL)],
        reason: Annotated[str, Query(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK)],
        tenant: Annotated[str | None, Query(pattern=TENANT)] = None,
    ) -> PrincipalLimits:
        return deps().controls().clear_quota(caller(), principal, reason, tenant)

    @app.get(
        "/status",
        responses=ERRORS,
        summary="Queue depths and ages, the backlog and estimated delays (a principal's own rows)",
    )
    def status() -> StatusReport:
        d, who = deps(), caller()
        principal = d.controls().visible_principal(who)
        return collect_status(d.sqs, d.settings, d.operations, d.sites, d.pace, d.clock.now(), principal)

    @app.post(
        "/uploads",
        responses=ERRORS,
        summary="A presigned upload of one file for an import, bound to the caller and its digest",
    )
    def upload(body: UploadRequest) -> UploadGrant:
        d, who = deps(), caller()
        return grant_upload(
            d.blobs, d.upload_signer, d.settings.max_upload_bytes, who.identity, body.site_id, body.sha256, body.bytes
        )

    @app.post("/reconcile", responses=ERRORS, summary="Run one reconciler sweep now (operators only)")
    def reconcile(body: ReconcileRequest) -> Sweep:
        who = caller()
        if not who.operator:
            raise Forbidden(f"{who.identity} may not run sweeps: only operators may")
        sweep = deps().reconciler().run(body.schedule)
        if sweep is None:
            raise InvalidInput(f"unknown schedule {body.schedule!r}", field="schedule")
        return sweep

    return app


def submitted_view(result: Submitted) -> SubmittedOperation:
    op = result.operation
    return SubmittedOperation(op.operation_id, op.site_id, op.kind, op.status.value, result.created, op.input_digest)


def body_limit(settings_max_input_bytes: int) -> int:
    return settings_max_input_bytes + BODY_OVERHEAD_BYTES


def refused_before_routing(event: dict[str, Any], limit: int) -> dict[str, Any] | None:
    """The HTTP API response refusing a request before anything parses its body: declared as anything but JSON
    (415), over `limit` (413), not UTF-8 text, which no JSON document is (400; API Gateway hands such a body over
    base64-encoded), or an array where every route takes an object (422: Powertools would validate an array's
    first element in its place). None: the request may go on."""
    refusal = _refusal_of_body(event, limit)
    if refusal is None:
        return None
    return {
        "statusCode": http_status(refusal),
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": json.dumps(error_document(refusal)),
        "isBase64Encoded": False,
    }


def _refusal_of_body(event: dict[str, Any], limit: int) -> SiteDispatchError | None:
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    declared = {k.lower(): v for k, v in (event.get("headers") or {}).items()}.get("content-type")
    media = (declared or "").split(";")[0].strip().lower()
    if body and declared is not None and media != content_types.APPLICATION_JSON and not media.endswith("+json"):
        return NotJsonMediaType(f"the body must be application/json, not {declared[:80]!r}", field="content-type")
    if size > limit:
        return TooLarge(f"the body is {size} bytes, over this API's {limit}-byte limit", field="body")
    text = body
    if event.get("isBase64Encoded"):
        try:
            text = base64.b64decode(body, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return NotJson("the body is not a JSON document (it is not UTF-8 text)", field="body")
    if text.lstrip().startswith("["):
        return InvalidInput("the body must be a JSON object, not an array", field="body")
    return None


def openapi_document(app: APIGatewayHttpResolver | None = None) -> dict[str, Any]:
    """The OpenAPI document Powertools generates from the routes and their pydantic models."""
    schema = (app or create_app(_no_deps)).get_openapi_schema(
        title=API_TITLE,
        version=API_VERSION,
        summary="Site-scoped asynchronous dispatch for a fleet of WordPress sites",
        description=(
            "Every route is authorized by IAM: sign requests with SigV4 (service execute-api). "
            "Errors have one body, ErrorBody; 429 carries Retry-After."
        ),
    )
    document: dict[str, Any] = schema.model_dump(mode="json", by_alias=True, exclude_none=True)
    return document


def routes(document: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Every (METHOD, /path/{param}) of the API, from its OpenAPI document (the stack makes one route of each)."""
    paths = (document or openapi_document())["paths"]
    return sorted((method.upper(), path) for path, operations in paths.items() for method in operations)


def _no_deps() -> Dependencies:
    raise RuntimeError("the OpenAPI document is built without dependencies")
