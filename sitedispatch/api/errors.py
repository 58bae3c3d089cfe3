"""The API's errors as HTTP: every refusal is the core's error as its one body (`ErrorBody`), with its status."""

from __future__ import annotations

import math
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from sitedispatch.api.models import error_responses
from sitedispatch.domain.errors import Backpressure, SiteDispatchError, error_document, http_status

ERRORS = error_responses()
SUBMIT_RESPONSES = {
    **ERRORS,
    200: {"description": "the same submit again (same key, same input): the existing operation"},
    202: {"description": "accepted: a new operation (Location names it)"},
}

LISTED = {
    **ERRORS,
    200: {
        "description": 'a page; when more may follow, its Link header names the next (rel="next", with a cursor)',
        "headers": {"Link": {"description": '<URL>; rel="next"', "schema": {"type": "string"}}},
    },
}


def answering(status: int, description: str) -> dict[int, Any]:
    """A route's responses when it succeeds with `status` instead of 200."""
    return {**{code: answer for code, answer in ERRORS.items() if code != 200}, status: {"description": description}}


def error_response(exc: SiteDispatchError) -> Response[Any]:
    headers = {}
    if isinstance(exc, Backpressure):
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
    return Response(http_status(exc), content_types.APPLICATION_JSON, error_document(exc), headers=headers)


def field_of(error: dict[str, Any]) -> str | None:
    """The field a validation error names, as a request spells it (`items.3.kind`)."""
    where = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path", "header")]
    return ".".join(where) or None
