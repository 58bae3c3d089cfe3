"""A principal's (or one of its tenants') limits: read by the principal, overridden and cleared by operators."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sitedispatch.domain.dependencies import KeyRates, Rate, checked_rates
from sitedispatch.domain.errors import Forbidden, InvalidInput
from sitedispatch.domain.model import (
    Quota,
    check_principal,
    check_tenant,
)
from sitedispatch.domain.resources import operation_lanes
from sitedispatch.flow.admission import (
    max_outstanding,
    max_running,
    quota_bounds,
)
from sitedispatch.flow.counters import principal_group, running_group, tenant_group
from sitedispatch.operator.access import Access, Caller


@dataclass(frozen=True)
class PrincipalLimits:
    principal: str
    tenant: str | None  # None: the principal's own limits (its outstanding operations in all)
    quota: Quota | None  # the operator's override, if any
    max_outstanding: int  # in effect
    max_running: int  # in effect, in each lane
    outstanding: int  # now
    running: dict[str, int]  # now, per lane
    rates: list[str] = field(default_factory=list)  # an operator's rates on the key's starts, each described


class Quotas(Access):
    def limits(self, caller: Caller, principal: str, tenant: str | None = None) -> PrincipalLimits:
        """A principal's (or one of its tenants') limits in effect (its override, else the deployment's) and how
        much of them it uses now. A principal may read its own; operators any."""
        check_principal(principal)
        if tenant is not None:
            check_tenant(tenant)
        if not caller.may_see(principal):  # a principal is not a tenant's resource: its name is no secret
            raise Forbidden(f"{caller.identity} may only read its own limits")
        return self._limits(principal, tenant)

    def set_quota(
        self,
        caller: Caller,
        principal: str,
        *,
        max_outstanding: int | None,
        max_running: int | None,
        reason: str,
        tenant: str | None = None,
        rates: tuple[Rate, ...] | None = None,
    ) -> PrincipalLimits:
        """Override a principal's limits, or one of its tenants' (operators only). Lowering one below what is
        already outstanding or running refuses new work until it drains; accepted work is never dropped. `rates`
        (None: as they are; (): none) limit the key's starts per period, at start, as a dependency's rates do; a
        principal's own apply to all its tenants' work together."""
        tenant = _own(principal, tenant)
        self._operator_only(caller, "quota", principal, reason)
        if rates is not None:
            checked_rates(rates)
        if max_outstanding is None and max_running is None and rates is None:
            raise InvalidInput("give --max-outstanding, --max-running, --rate or several", field="max_outstanding")
        if rates is not None:
            before_rates = self.deps.quotas.key_rates(principal, tenant)
            now = self.deps.clock.now()
            self.deps.quotas.put_key_rates(KeyRates(principal, tenant, rates, caller.identity, now, reason))
            was = [r.describe() for r in before_rates.rates] if before_rates else []
            told = {"rates": [r.describe() for r in rates], "was": was} | ({"tenant": tenant} if tenant else {})
            self._record(caller, "quota-rates", principal, None, reason, "ok", told)
            if max_outstanding is None and max_running is None:
                return self._limits(principal, tenant)
        for name, value in (("max_outstanding", max_outstanding), ("max_running", max_running)):
            if value is not None and not 1 <= value <= self.deps.settings.max_outstanding_global:
                raise InvalidInput(
                    f"{name} must be between 1 and the global limit "
                    f"{self.deps.settings.max_outstanding_global}, got {value}",
                    field=name,
                )
        before = self.deps.quotas.get(principal, tenant)
        quota = Quota(principal, max_outstanding, max_running, caller.identity, self.deps.clock.now(), reason, tenant)
        bounded = list(quota_bounds(principal, tenant, quota))
        held = {counter: reading.value for counter, reading in self.deps.operations.read_counters(bounded).items()}
        self.deps.quotas.put(quota, quota_bounds(principal, tenant, quota, held))
        detail: dict[str, Any] = {
            "max_outstanding": max_outstanding,
            "max_running": max_running,
            "was": None
            if before is None
            else {"max_outstanding": before.max_outstanding, "max_running": before.max_running},
        }
        if tenant is not None:
            detail["tenant"] = tenant
        self._record(caller, "quota", principal, None, reason, "ok", detail)
        return self._limits(principal, tenant)

    def clear_quota(self, caller: Caller, principal: str, reason: str, tenant: str | None = None) -> PrincipalLimits:
        """Back to the deployment's limits (operators only)."""
        tenant = _own(principal, tenant)
        self._operator_only(caller, "quota", principal, reason)
        existed = self.deps.quotas.clear(principal, tenant, list(quota_bounds(principal, tenant, None)))
        if self.deps.quotas.key_rates(principal, tenant) is not None:
            self.deps.quotas.put_key_rates(KeyRates(principal, tenant, (), caller.identity, self.deps.clock.now()))
            existed = True
        detail: dict[str, Any] = {"cleared": existed} | ({"tenant": tenant} if tenant is not None else {})
        self._record(caller, "quota", principal, None, reason, "ok" if existed else "skipped", detail)
        return self._limits(principal, tenant)

    def _limits(self, principal: str, tenant: str | None) -> PrincipalLimits:
        settings, quota = self.deps.settings, self.deps.quotas.get(principal, tenant)
        key_rates = self.deps.quotas.key_rates(principal, tenant)
        key = tenant or principal
        outstanding = (principal_group(principal, 0) if tenant is None else tenant_group(principal, key, 0)).shard_ids()
        running = {lane: running_group(lane, principal, key, 0).shard_ids() for lane in operation_lanes()}
        readings = self.deps.operations.read_counters([*outstanding, *(c for ids in running.values() for c in ids)])

        def total(ids: list[str]) -> int:
            return sum(readings[c].value for c in ids if c in readings)

        return PrincipalLimits(
            principal,
            tenant,
            quota,
            max_outstanding(settings, quota, tenant=tenant is not None),
            max_running(settings, quota),
            total(outstanding),
            {lane: total(ids) for lane, ids in running.items()},
            [r.describe() for r in key_rates.rates] if key_rates else [],
        )


def _own(principal: str, tenant: str | None) -> str | None:
    """A quota's tenant: None for the principal's own (naming the principal as its tenant is the same)."""
    if tenant is None or tenant == principal:
        return None
    check_tenant(tenant)
    return tenant
