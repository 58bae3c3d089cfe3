"""The event feed: a principal's events in order after a cursor, as a bounded long poll."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import NUMBER, PRINCIPAL, TENANT, EventBody, EventPage
from sitedispatch.api.request import caller, dependencies
from sitedispatch.domain.events import FEED_RETENTION_DAYS, EventType
from sitedispatch.events.feed import MAX_WAIT_S, FeedFilter, FeedReader

router = Router()
MAX_PAGE = 500


@router.get(
    "/events",
    responses=ERRORS,
    summary=f"The caller's events after a cursor, oldest first (kept {FEED_RETENTION_DAYS} days); waits for some",
)
def events(
    after: Annotated[
        int, Field(ge=0), Query(description="the cursor a previous page returned (0: the start)"), NUMBER
    ] = 0,
    wait_s: Annotated[
        float, Field(ge=0, le=MAX_WAIT_S), Query(description="how long to wait for an event"), NUMBER
    ] = 0.0,
    type: Annotated[list[EventType] | None, Query(description="only these types (repeat the parameter)")] = None,
    tenant: Annotated[str | None, Query(pattern=TENANT)] = None,
    principal: Annotated[str | None, Query(pattern=PRINCIPAL, description="whose feed (operators only)")] = None,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE), Query(), NUMBER] = 100,
) -> EventPage:
    d = dependencies()
    page = FeedReader(d.events, d.clock).page(
        caller(), principal, after, limit, FeedFilter(tuple(type or ()), tenant), wait_s
    )
    return EventPage(events=[EventBody.model_validate(event) for event in page.events], after=page.after)
