"""Quotas: a principal's (or one of its tenants') limits and their use; operators override and clear them."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import NOT_BLANK, PRINCIPAL, REASON_CHARS, TENANT, QuotaRequest
from sitedispatch.api.request import caller, dependencies
from sitedispatch.operator.dependencies import rate_of
from sitedispatch.operator.quotas import PrincipalLimits

router = Router()


@router.get("/quotas", responses=ERRORS, summary="A principal's (or one of its tenants') limits and their use")
def get_quota(
    principal: Annotated[str | None, Query(pattern=PRINCIPAL)] = None,
    tenant: Annotated[str | None, Query(pattern=TENANT)] = None,
) -> PrincipalLimits:
    who = caller()
    return dependencies().controls().limits(who, principal or who.identity, tenant)


@router.put("/quotas", responses=ERRORS, summary="Override a principal's limits (operators only)")
def set_quota(body: QuotaRequest) -> PrincipalLimits:
    return (
        dependencies()
        .controls()
        .set_quota(
            caller(),
            body.principal,
            max_outstanding=body.max_outstanding,
            max_running=body.max_running,
            reason=body.reason,
            tenant=body.tenant,
            rates=None
            if body.rates is None
            else tuple(rate_of(r.kind, r.limit, r.period_s, r.burst) for r in body.rates),
        )
    )


@router.delete("/quotas", responses=ERRORS, summary="Remove a principal's override (operators only)")
def clear_quota(
    principal: Annotated[str, Query(pattern=PRINCIPAL)],
    reason: Annotated[str, Query(min_length=1, max_length=REASON_CHARS, pattern=NOT_BLANK)],
    tenant: Annotated[str | None, Query(pattern=TENANT)] = None,
) -> PrincipalLimits:
    return dependencies().controls().clear_quota(caller(), principal, reason, tenant)
