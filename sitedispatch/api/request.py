"""The request a route serves: the dependencies of the app resolving it, and who sent it.

Each route module has its own Powertools `Router`; the app that includes them binds itself and its dependencies for
the length of each request it resolves (`binding`), and a route asks here for them and for its caller."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Query

from sitedispatch.domain.errors import Forbidden
from sitedispatch.domain.model import stable_identity
from sitedispatch.domain.paging import CURSOR, MAX_CURSOR_CHARS, Page
from sitedispatch.operator.access import READS, Caller

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

    from sitedispatch.dependencies import Dependencies

# The app resolving the current request, and its dependencies.
_SERVING: ContextVar[tuple[APIGatewayHttpResolver, Callable[[], Dependencies]]] = ContextVar("sitedispatch_api")


def binding(
    deps: Callable[[], Dependencies],
) -> Callable[[APIGatewayHttpResolver, NextMiddleware], Response[Any]]:
    """The app's middleware that makes `deps` the dependencies of every request it resolves."""

    def bind(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[Any]:
        token = _SERVING.set((app, deps))
        try:
            return next_middleware(app)
        finally:
            _SERVING.reset(token)

    return bind


def read_only(app: APIGatewayHttpResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """The app's middleware that refuses (403, audited) every request but a read from a reader, before its route
    runs: the server enforces a read-only identity, whatever a client hides or shows."""
    method = app.current_event.http_method
    if method not in READS and _verified_arn() is not None:
        who = caller()
        if who.reader:  # only then is the audit log reached: the other callers' requests pay a pattern match
            dependencies().controls().refuse_reader(who, method, app.current_event.path)
    return next_middleware(app)


def query() -> dict[str, str]:
    """The current request's query parameters (the last value of a repeated one), as it sent them."""
    return dict(_SERVING.get()[0].current_event.query_string_parameters or {})


def dependencies() -> Dependencies:
    return _SERVING.get()[1]()


def caller() -> Caller:
    """Who API Gateway verified (`requestContext.authorizer.iam.userArn`), never anything the request says."""
    arn = _verified_arn()
    if not arn:
        raise Forbidden("the request is not signed: sign it with SigV4 (service execute-api)")
    return Caller.of(stable_identity(arn), dependencies().settings)


def _verified_arn() -> str | None:
    iam = _SERVING.get()[0].current_event.request_context.authorizer.iam
    return (iam.user_arn if iam is not None else None) or None


# A listing's cursor parameter, as every paged route declares it.
CURSOR_QUERY = Query(
    min_length=1,
    max_length=MAX_CURSOR_CHARS,
    pattern=CURSOR,
    description="the next page's, from the Link header of the page before (opaque)",
)


def paged(page: Page[Any], path: str) -> Response[Any]:
    """A page as the API answers it: its items, and a Link header naming the next page when one may follow."""
    headers = {}
    if page.cursor is not None:
        following = {**query(), "cursor": page.cursor}
        headers["Link"] = f'<{path}?{urlencode(following)}>; rel="next"'
    return Response(200, content_types.APPLICATION_JSON, page.items, headers=headers)
