"""The HTTP API: every producer and operator action as a route, behind API Gateway's IAM (SigV4) authorization.

Who calls is what API Gateway verified (`requestContext.authorizer.iam.userArn`), never anything in the request;
what the caller may see or do is decided by the core (`operator.controls`, `operations.submission`), never here.
The routes (`api/routes/`, a module per resource) only translate HTTP to the core's calls and the core's answers
and errors back to HTTP; this module puts them together:

    202 + Location   a new operation            200   the same submit again (same key, same input)
    400              a body that is not JSON    422   a field that is wrong (named in `field`)
    404              missing, or another tenant's (the two are indistinguishable)
    403              what only operators may do, anything but a read from a reader, or an unsigned request
    409              an idempotency or state conflict
    413              a body over the route's limit
    429 + Retry-After  backpressure (`retry_after_s`, `estimated_delay_s`, the limit and its value in the body)

Every error body is `ErrorBody` (written by `sitedispatch.domain.errors.error_document`), in the OpenAPI document
for every route.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from sitedispatch import observability as obs
from sitedispatch.api.errors import error_response, field_of
from sitedispatch.api.request import binding, read_only
from sitedispatch.api.routes import (
    audit,
    dead_letters,
    dependencies,
    events,
    fleet,
    operations,
    quotas,
    sites,
    uploads,
    webhooks,
)
from sitedispatch.domain.errors import (
    InvalidInput,
    NotFound,
    NotJson,
    NotJsonMediaType,
    SiteDispatchError,
    TooLarge,
    error_document,
    http_status,
)

if TYPE_CHECKING:
    from sitedispatch.dependencies import Dependencies

API_TITLE = "sitedispatch"
API_VERSION = "1"
# What only operators (and, of these, the reads: readers) may call: the producer policy does not grant these routes
# at all (and the core refuses them).
OPERATOR_ROUTES = frozenset(
    {
        ("PUT", "/quotas"),
        ("DELETE", "/quotas"),
        ("POST", "/reconcile"),
        ("GET", "/status/minutes"),
        ("PUT", "/dependencies/{dependency_id}"),
        ("DELETE", "/dependencies/{dependency_id}"),
        ("POST", "/dependencies/{dependency_id}/pause"),
        ("POST", "/dependencies/{dependency_id}/resume"),
    }
)
BODY_OVERHEAD_BYTES = 16 * 1024  # a submit's envelope around its input
ROUTERS = (
    operations.router,
    sites.router,
    dead_letters.router,
    audit.router,
    quotas.router,
    fleet.router,
    uploads.router,
    events.router,
    webhooks.router,
    dependencies.router,
)


def create_app(deps: Callable[[], Dependencies]) -> APIGatewayHttpResolver:
    """The resolver of every route, its answers to refusals, and `deps` bound to each request it resolves."""
    app = APIGatewayHttpResolver(enable_validation=True)
    app.use([binding(deps), read_only])
    for router in ROUTERS:
        app.include_router(router)

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
        name = field_of(first)
        message = f"{name}: {first.get('msg', 'invalid')}" if name else str(first.get("msg", "invalid request"))
        return error_response(InvalidInput(message, field=name))

    @app.not_found
    def no_route(_: Exception) -> Response[Any]:
        event = app.current_event
        return error_response(NotFound(f"no route {event.http_method} {event.path}"))

    return app


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


def with_decoded_colons(event: dict[str, Any]) -> dict[str, Any]:
    """The request with a ':' sent percent-encoded in its path (`%3A`, as many clients send a dependency id's) as
    the character: the routes match the raw path, and both spellings name the same resource (RFC 3986 2.2). Only
    the colon: an encoded '/' stays inside its segment."""
    raw = event.get("rawPath")
    if not isinstance(raw, str) or "%3" not in raw.upper():
        return event
    decoded = raw.replace("%3A", ":").replace("%3a", ":")
    parameters = {k: v.replace("%3A", ":").replace("%3a", ":") for k, v in (event.get("pathParameters") or {}).items()}
    return {**event, "rawPath": decoded, **({"pathParameters": parameters} if event.get("pathParameters") else {})}


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
