"""Sites: register one with its driver, read it, its history and a live route; pause and resume it; delete an empty
one."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS, LISTED
from sitedispatch.api.models import (
    NOT_BLANK,
    NUMBER,
    REASON_CHARS,
    ReasonRequest,
    RegisterSiteRequest,
    SiteDependenciesRequest,
)
from sitedispatch.api.request import CURSOR_QUERY, caller, dependencies, paged
from sitedispatch.domain.model import Site, SiteConnection
from sitedispatch.operator.reads import LiveRoute, SiteHistory

router = Router()


@router.post("/sites", responses=ERRORS, summary="Register a site with its driver, before its first operation")
def register_site(body: RegisterSiteRequest) -> Site:
    connection = SiteConnection(body.driver, body.url, body.credential)
    site = dependencies().submitter().register_site(body.site_id, caller().identity, connection)
    if body.dependencies and tuple(body.dependencies) != site.dependencies:
        return dependencies().controls().set_site_dependencies(caller(), site.site_id, body.dependencies, "registered")
    return site


@router.get("/sites", responses=LISTED, summary="A page of the caller's sites (an operator's: every site)")
def list_sites(
    search: Annotated[str | None, Query(min_length=1, max_length=64, description="only ids containing this")] = None,
    paused: Annotated[bool | None, Query(description="only paused (true) or running (false) sites")] = None,
    cursor: Annotated[str | None, CURSOR_QUERY] = None,
    limit: Annotated[int, Field(ge=1, le=10_000), Query(), NUMBER] = 100,
) -> Response[list[Site]]:
    page = dependencies().controls().sites(caller(), search=search, paused=paused, limit=limit, cursor=cursor)
    return paged(page, "/sites")


@router.get("/sites/<site_id>", responses=ERRORS, summary="A site: owner, head, lease, fence, pause")
def get_site(site_id: str) -> Site:
    return dependencies().controls().site(caller(), site_id)


@router.delete(
    "/sites/<site_id>",
    responses=ERRORS,
    summary="Delete a site that has nothing (no commit, nothing queued or running): its id is free again",
)
def delete_site(
    site_id: str, reason: Annotated[str, Query(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK)]
) -> Site:
    return dependencies().controls().delete_site(caller(), site_id, reason)


@router.get("/sites/<site_id>/history", responses=ERRORS, summary="The site's commits and publications, newest first")
def site_history(site_id: str, limit: Annotated[int, Field(ge=1, le=1000), Query(), NUMBER] = 50) -> SiteHistory:
    return dependencies().controls().history(caller(), site_id, limit)


@router.get("/sites/<site_id>/live", responses=ERRORS, summary="The live content of one route of the site")
def live_route(site_id: str, route: Annotated[str, Query(max_length=2048)] = "/") -> LiveRoute:
    return dependencies().controls().live_route(caller(), site_id, route)


@router.post(
    "/sites/<site_id>/pause", responses=ERRORS, summary="Pause a site: its queued operations wait, no attempt spent"
)
def pause_site(site_id: str, body: ReasonRequest) -> Site:
    return dependencies().controls().set_paused(caller(), site_id, True, body.reason or "paused by operator")


@router.post("/sites/<site_id>/resume", responses=ERRORS, summary="Resume a paused site")
def resume_site(site_id: str, body: ReasonRequest) -> Site:
    return dependencies().controls().set_paused(caller(), site_id, False, body.reason or None)


@router.put(
    "/sites/<site_id>/dependencies",
    responses=ERRORS,
    summary="Set what a site shares with other sites (its owner or an operator): for attempts not yet started",
)
def set_site_dependencies(site_id: str, body: SiteDependenciesRequest) -> Site:
    return dependencies().controls().set_site_dependencies(caller(), site_id, body.dependencies, body.reason)
