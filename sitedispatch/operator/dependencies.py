"""Dependencies as a person sees and changes them: what each site names (its owner's or an operator's to change),
each dependency's cap, rates and breaker (an operator's to set, pause and resume), every change audited.

Confinement: a principal sees a dependency one of its sites names, and of it only what is its own (its sites, the
evidence from its sites); who else shares it is not shown. An operator or reader sees every one, whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sitedispatch import observability as obs
from sitedispatch.domain.dependencies import (
    BREAKER,
    BreakerState,
    Dependency,
    Rate,
    checked_rates,
    dependency_id,
    site_dependencies,
)
from sitedispatch.domain.errors import InvalidInput, NotFound
from sitedispatch.domain.events import OPERATOR
from sitedispatch.domain.model import NOT_BLANK_PATTERN, Kind, Site
from sitedispatch.domain.resources import operation_lanes
from sitedispatch.flow.counters import dependency_label
from sitedispatch.flow.dependencies import rate_key, wake_held
from sitedispatch.operator.access import Access, Caller, ControlDeps
from sitedispatch.operator.status import DependencyRow

SITES_SHOWN = 1000  # of a dependency's sites, in a view


@dataclass(frozen=True)
class RateView:
    kind: str  # a kind, or "all"
    limit: int
    period_s: float
    burst: int
    describe: str
    next_start_at: float | None  # when the next start is allowed (None: now)


@dataclass(frozen=True)
class DependencyView:
    """A dependency as the caller may see it: settings, breaker, use now."""

    dependency_id: str
    max_running: int | None  # None: uncapped
    rates: list[RateView]
    state: BreakerState
    reason: str | None  # why it is open or paused
    changed_by: str | None  # "breaker", or an operator ("operator" to a principal)
    changed_at: float | None
    reopen_at: float | None  # open: when a probe may start
    cooldown_s: float | None
    probe: str | None  # half open: the probing operation (operators only)
    evidence: list[dict[str, Any]]  # the failures that opened it (a principal: those of its own sites)
    running: int  # attempts running on it now
    sites: list[str]  # the sites naming it (a principal: its own), at most SITES_SHOWN
    site_count: int  # of them in all
    settings_reason: str | None = None
    settings_at: float | None = None
    settings_by: str | None = None  # operators only
    principals: list[str] = field(default_factory=list)  # operators only: whose sites name it


class Dependencies(Access):
    def dependencies(self, caller: Caller) -> list[DependencyView]:
        """Every dependency the caller may see, by id."""
        listed = self.deps.dependencies.list(None)
        visible = [d for d in listed if caller.sees_all or caller.identity in d.principals]
        return self._views(caller, visible)

    def dependency_rows(self, caller: Caller) -> list[DependencyRow]:
        """The status report's rows: every dependency the caller may see."""
        return [
            DependencyRow(
                v.dependency_id,
                v.state.value,
                v.running,
                v.max_running,
                [r.describe + (f"; next start at {r.next_start_at:.0f}" if r.next_start_at else "") for r in v.rates],
                v.reason,
            )
            for v in self.dependencies(caller)
        ]

    def dependency(self, caller: Caller, dependency: str) -> DependencyView:
        return self._views(caller, [self._visible(caller, dependency)])[0]

    def set_dependency(
        self, caller: Caller, dependency: str, max_running: int | None, rates: tuple[Rate, ...], reason: str
    ) -> DependencyView:
        """An operator sets its cap and rates (replacing what was set; None and () are unlimited), effective for
        starts from now on."""
        dependency_id(dependency)
        checked_rates(rates)
        if max_running is not None and not 1 <= max_running <= self.deps.settings.max_outstanding_global:
            raise InvalidInput(
                f"max_running must be between 1 and {self.deps.settings.max_outstanding_global}", field="max_running"
            )
        self._operator(caller, "dependency", dependency, reason)
        before = self.deps.dependencies.get(dependency) or Dependency(dependency)
        after = self.deps.dependencies.put_settings(
            dependency, max_running, rates, caller.identity, reason, self.deps.clock.now()
        )
        self._record(
            caller,
            "dependency",
            dependency,
            None,
            reason,
            "ok",
            {"settings": _settings(after), "was": _settings(before)},
        )
        return self._views(caller, [after])[0]

    def clear_dependency(self, caller: Caller, dependency: str, reason: str) -> DependencyView:
        """Unlimited again (its breaker as it is: a paused one stays paused until resumed)."""
        return self.set_dependency(caller, dependency, None, (), reason)

    def set_dependency_paused(self, caller: Caller, dependency: str, paused: bool, reason: str) -> DependencyView:
        """An operator pauses it (nothing on it starts, no attempt spent) or resumes it (from paused, or from an
        open or half open breaker), told to every principal whose site names it."""
        action = "pause-dependency" if paused else "resume-dependency"
        dependency_id(dependency)
        self._operator(caller, action, dependency, reason)
        d = self.deps
        now = d.clock.now()
        changed = (
            d.dependencies.pause(dependency, reason, OPERATOR, now)
            if paused
            else d.dependencies.resume(dependency, OPERATOR, now)
        )
        current = changed or d.dependencies.get(dependency) or Dependency(dependency)
        if changed is not None and not paused:
            self._wake_held_starts(dependency)
        self._record(
            caller,
            action,
            dependency,
            None,
            reason,
            "ok" if changed is not None else "skipped",
            {"state": current.state.value} | ({} if changed is not None else {"why": f"already {current.state}"}),
        )
        return self._views(caller, [current])[0]

    def _wake_held_starts(self, dependency: str) -> int:
        """The starts it held, made visible now that it is resumed (in every lane). A failure is logged: what it
        leaves comes back when its deferral ends."""
        d = self.deps
        try:
            return sum(wake_held(d.dependencies, d.queue, dependency, lane) for lane in operation_lanes())
        except Exception as exc:
            obs.logger.warning(
                "could not wake the starts it held", extra={"dependency": dependency, "error": repr(exc)}
            )
            return 0

    def set_site_dependencies(self, caller: Caller, site_id: str, dependencies: object, reason: str) -> Site:
        """What a site shares with other sites, changed by its owner or an operator (audited): attempts not yet
        started take their places on the new ones."""
        ids = site_dependencies(dependencies)
        site = self.site(caller, site_id, "site-dependencies", reason)
        updated = self.deps.sites.set_dependencies(site_id, ids)
        # its work waits by the new set once nothing of it is outstanding (now, or at the end of its last one)
        self.deps.operations.relabel_site(site_id, dependency_label(ids))
        name_dependencies(self.deps, site, ids)
        self._record(
            caller,
            "site-dependencies",
            site_id,
            site_id,
            reason,
            "ok",
            {"dependencies": list(ids), "was": list(site.dependencies)},
        )
        return updated

    def _operator(self, caller: Caller, action: str, target: str, reason: str) -> None:
        if not NOT_BLANK_PATTERN.search(reason):
            raise InvalidInput("a reason is required (it goes into the audit trail)", field="reason")
        if not caller.operator:
            self._deny(
                caller,
                f"{caller.identity} may not change dependencies: only operators may",
                action,
                target,
                None,
                reason,
            )

    def _visible(self, caller: Caller, dependency: str) -> Dependency:
        dependency_id(dependency)
        found = self.deps.dependencies.get(dependency) or Dependency(dependency)
        if caller.sees_all or caller.identity in found.principals:
            return found
        raise NotFound(f"dependency {dependency} not found")

    def _views(self, caller: Caller, dependencies: list[Dependency]) -> list[DependencyView]:
        d = self.deps
        now = d.clock.now()
        ids = [x.dependency_id for x in dependencies]
        running = d.dependencies.running(ids) if ids else {}
        tats = d.dependencies.buckets([rate_key(x.dependency_id, r) for x in dependencies for r in x.rates])
        own: set[str] | None = None
        if not caller.sees_all:
            named = sorted({s for x in dependencies for s in x.sites})
            own = {s.site_id for s in d.sites.get_many(named).values() if s.principal == caller.identity}
        return [_view(x, running.get(x.dependency_id, 0), tats, now, caller, own) for x in dependencies]


def name_dependencies(d: ControlDeps, site: Site, ids: tuple[str, ...]) -> None:
    """The dependencies' side of a site's change (or deletion: `ids` empty): it is among their sites (its owner
    hears of them) or no longer (nor its owner, once none of its sites names one)."""
    now = d.clock.now()
    d.dependencies.named([i for i in ids if i not in site.dependencies], site.principal, site.site_id, now)
    for dropped in (i for i in site.dependencies if i not in ids):
        others = (d.dependencies.get(dropped) or Dependency(dropped)).sites - {site.site_id}
        still = any(s.principal == site.principal for s in d.sites.get_many(sorted(others)).values())
        d.dependencies.unnamed([dropped], site.site_id, None if still else site.principal, now)


def _view(
    x: Dependency, running: int, tats: dict[str, float], now: float, caller: Caller, own: set[str] | None
) -> DependencyView:
    sites = sorted(x.sites if own is None else x.sites & own)
    evidence = [e for e in x.evidence if own is None or e.get("site_id") in own]
    rates = [
        RateView(
            r.applies_to,
            r.limit,
            r.period_s,
            r.burst,
            r.describe(),
            _later(r.allowed_at(tats.get(rate_key(x.dependency_id, r)), now), now),
        )
        for r in x.rates
    ]
    whole = caller.sees_all
    return DependencyView(
        dependency_id=x.dependency_id,
        max_running=x.max_running,
        rates=rates,
        state=x.state,
        reason=x.reason,
        changed_by=x.changed_by if whole or x.changed_by in (BREAKER, None) else OPERATOR,
        changed_at=x.changed_at,
        reopen_at=x.reopen_at,
        cooldown_s=x.cooldown_s,
        probe=x.probe if whole else None,
        evidence=evidence,
        running=running,
        sites=sites[:SITES_SHOWN],
        site_count=len(sites),
        settings_reason=x.settings_reason,
        settings_at=x.settings_at,
        settings_by=x.settings_by if whole else None,
        principals=sorted(x.principals) if whole else [],
    )


def _later(at: float, now: float) -> float | None:
    return at if at > now else None


def _settings(x: Dependency) -> dict[str, Any]:
    return {"max_running": x.max_running, "rates": [r.to_dict() for r in x.rates]}


def rate_of(kind: str, limit: int, period_s: float, burst: int) -> Rate:
    """A rate as a request gives it (`kind` a kind or "all")."""
    try:
        applies = None if kind == "all" else Kind(kind)
    except ValueError:
        raise InvalidInput(f"a rate's kind is a kind of operation or 'all', not {kind!r}", field="rates") from None
    return Rate(limit, period_s, burst, applies)
