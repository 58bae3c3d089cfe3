"""The audit log: who did what, newest first (a principal reads its own actions; an operator every one)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import NUMBER, PRINCIPAL, SITE_ID
from sitedispatch.api.request import caller, dependencies
from sitedispatch.domain.model import AuditEntry

router = Router()
# The audit log is read one day partition at a time: a bounded look back bounds the reads of one request.
MAX_AUDIT_S = 90 * 86_400


@router.get("/audit", responses=ERRORS, summary="Audit entries, newest first (a principal's own actions)")
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
    d = dependencies()
    return d.controls().audit_entries(
        caller(),
        d.clock.now() - since_s,
        actor=actor,
        action=action,
        target=target,
        site_id=site_id,
        limit=limit,
    )
