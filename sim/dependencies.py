"""Dependencies in the simulation: what the seed draws (which sites name which of one or two dependencies, each one's
cap and rate; an operator's rates on one or two fairness keys, through quotas), an operator's pauses of a dependency
(resumed ten virtual minutes later), and the invariants checked after every step:

- never more attempts running on a dependency than its cap (its running operations, and its running shards);
- starts on a rate's key (a dependency's, or a fairness key's while its rates are set) in any window of one period
  at most its limit + burst + 1 (the margin: a start reserved ahead keeps its place while it is at most one
  interval late);
- an open or paused breaker starts nothing; a half open one only its probe.
The end checks (`chaos/invariants.py`) hold the rest: nothing accepted is lost, the slots equal the recount."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field, replace
from random import Random
from typing import Any, cast

from chaos.invariants import Violations
from sitedispatch.domain.dependencies import BreakerState, Dependency, KeyRates, Rate
from sitedispatch.domain.errors import TransientError
from sitedispatch.domain.model import Kind, Status
from sitedispatch.domain.ports import Clock
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.dependencies import key_rates_for
from sitedispatch.kinds.contract import HandlerContext, Mutation, SiteDriver
from tests.fakes import MemoryWorld

MUTATIONS = frozenset({"provision", "import_wxr", "publish", "wp_cron", "recover"})

DEPENDENCY_IDS = ("db:sim-0", "php:sim-1")
PAUSE_S = 600.0  # an operator's pause of a dependency lasts ten virtual minutes
RATE_MARGIN = 1  # a reservation is honoured up to one interval late


@dataclass
class DependencyPlan:
    named: dict[str, tuple[str, ...]] = field(default_factory=dict)  # site -> the dependencies it names
    settings: dict[str, tuple[int | None, tuple[Rate, ...]]] = field(default_factory=dict)
    breaker: dict[str, float] = field(default_factory=dict)  # the deployment's breaker settings, drawn
    outage: tuple[str, float, float] | None = None  # (dependency, from, to): its sites' attempts fail meanwhile
    key_rates: tuple[KeyRates, ...] = ()  # an operator's rates on fairness keys (a principal's, or a tenant's)

    def with_key_rates(self, rng: Random, tenants: dict[str, list[str]]) -> DependencyPlan:
        """Half the seeds also rate one or two fairness keys' starts (all kinds, or one)."""
        if rng.random() < 0.5:
            return self
        drawn: dict[tuple[str, str | None], KeyRates] = {}
        for _ in range(rng.randint(1, 2)):
            principal = rng.choice(sorted(tenants))
            tenant = rng.choice(tenants[principal]) or None
            rate = Rate(rng.choice((1, 2)), rng.choice((5.0, 20.0, 60.0)), rng.randint(1, 2))
            if rng.random() < 0.3:
                rate = Rate(rate.limit, rate.period_s, rate.burst, Kind.PUBLISH)
            drawn[(principal, tenant)] = KeyRates(principal, tenant, (rate,), "sim-operator", 0.0, "sim")
        return replace(self, key_rates=tuple(drawn.values()))

    @classmethod
    def drawn(cls, rng: Random, sites: list[str]) -> DependencyPlan:
        """Half the seeds have none; the others one or two dependencies, each site naming some."""
        if rng.random() < 0.5:
            return cls()
        ids = DEPENDENCY_IDS[: rng.randint(1, 2)]
        named = {site: tuple(i for i in ids if rng.random() < 0.75) for site in sites}
        settings: dict[str, tuple[int | None, tuple[Rate, ...]]] = {}
        for i in ids:
            cap = rng.choice((None, 1, 2, 3))
            rates = rng.choice(
                (
                    (),
                    (Rate(1, rng.choice((2.0, 10.0, 60.0)), rng.randint(1, 2)),),
                    (Rate(2, 30.0, 1, Kind.PUBLISH),),
                )
            )
            settings[i] = (cap, rates)
        breaker = {
            "dependency_failures_to_open": float(rng.randint(2, 5)),
            "dependency_window_s": rng.choice((60.0, 300.0)),
            "dependency_cooldown_s": rng.choice((5.0, 30.0)),
        }
        outage = None
        if rng.random() < 0.5:
            at = rng.uniform(5.0, 200.0)
            outage = (rng.choice(ids), at, at + rng.uniform(30.0, 300.0))
        return cls({site: deps for site, deps in named.items() if deps}, settings, breaker, outage)

    def failing(self, named: tuple[str, ...], now: float) -> str | None:
        """The dependency of those a site names (`named`, as its attempt read them) down at `now`, if any."""
        if self.outage is None:
            return None
        dependency_id, start, end = self.outage
        return dependency_id if start <= now < end and dependency_id in named else None

    def settings_for(self, settings: Settings) -> Settings:
        if not self.on:
            return settings
        drawn = {k: int(v) if k == "dependency_failures_to_open" else v for k, v in self.breaker.items()}
        return settings.model_copy(update=drawn)

    @property
    def on(self) -> bool:
        return bool(self.named)

    def apply(self, world: MemoryWorld, owner: dict[str, str], now: float) -> None:
        """Before the workload: each site registered by its owner naming its dependencies, each one's settings."""
        for site, ids in self.named.items():
            world.sites.register(site, owner[site], now)
            world.sites.set_dependencies(site, ids)
            world.dependency_store.named(ids, owner[site], site, now)
        for i, (cap, rates) in self.settings.items():
            world.dependency_store.put_settings(i, cap, rates, "sim-operator", "sim", now)
        for key_rates in self.key_rates:
            world.quotas.put_key_rates(replace(key_rates, at=now))

    def describe(self) -> str:
        keys = [f"key {k.principal}/{k.tenant or '*'} {[r.describe() for r in k.rates]}" for k in self.key_rates]
        if not self.on:
            return "; ".join(keys) or "none"
        down = f"; {self.outage[0]} down {self.outage[1]:.0f}-{self.outage[2]:.0f} s" if self.outage else ""
        shown = []
        for i, (cap, rates) in self.settings.items():
            sites = sum(i in ids for ids in self.named.values())
            shown.append(f"{i} on {sites} sites, cap {cap}, rates {[r.describe() for r in rates]}")
        return "; ".join([*shown, *keys]) + down


class OutageDriver:
    """A site driver whose attempts fail, as the destination would while a dependency of the site is down."""

    def __init__(self, inner: SiteDriver, plan: DependencyPlan, clock: Clock, start: float) -> None:
        self.inner, self.plan, self.clock, self.start = inner, plan, clock, start

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in MUTATIONS:
            return attribute

        def attempt(ctx: HandlerContext, payload: Any) -> Mutation:
            down = self.plan.failing(ctx.site.dependencies, self.clock.now() - self.start)
            if down is not None:
                raise TransientError(f"{down} unavailable")
            return cast(Mutation, attribute(ctx, payload))

        return attempt


class DependencyWatch:
    """After every step: caps, the breaker's gate and each start's place in its rates."""

    def __init__(self, world: MemoryWorld, plan: DependencyPlan, violations: Violations) -> None:
        self.world, self.plan, self.violations = world, plan, violations
        # (operation, epoch, attempt) seen started -> the dependencies its site named then (a site may move)
        self.started: dict[tuple[str, int, int], tuple[str, ...]] = {}
        self.starts: dict[tuple[str, str], list[float]] = defaultdict(list)  # (dependency, rate kind) -> times
        self.figures: dict[str, int] = defaultdict(int)

    def after_step(self) -> None:
        if not (self.plan.on or self.plan.key_rates):
            return
        db = self.world.db
        running: dict[str, int] = defaultdict(int)
        for op in db.operations.values():
            if op.status != Status.RUNNING:
                continue
            key = (op.operation_id, op.epoch, op.attempt)
            if key not in self.started:
                site = db.sites.get(op.site_id)
                ids = self.started[key] = site.dependencies if site is not None else ()
                at = op.started_at or self.world.clock.now()
                if ids:
                    self._started(op.operation_id, op.kind, at, ids)
                self._in_key_rates(op.principal, op.tenant or None, op.kind, at)
            for i in self.started[key]:
                running[i] += 1
        for i, (cap, _) in self.plan.settings.items():
            held = self.world.dependency_store.running((i,))[i]
            if cap is not None and max(running[i], held) > cap:
                self.violations.add(
                    "never more attempts running on a dependency than its cap",
                    f"{i}: {running[i]} running, {held} held, cap {cap}",
                )

    def _started(self, operation_id: str, kind: Kind, at: float, ids: tuple[str, ...]) -> None:
        self.figures["dependency_starts"] += 1
        for i in ids:
            dependency = self.world.db.dependencies.get(i) or Dependency(i)
            if dependency.state in (BreakerState.OPEN, BreakerState.PAUSED) or (
                dependency.state == BreakerState.HALF_OPEN and dependency.probe != operation_id
            ):
                self.violations.add(
                    "an open or paused breaker starts nothing but its probe",
                    f"{operation_id} started on {i} while {dependency.state.value} (probe {dependency.probe})",
                )
            if dependency.state == BreakerState.HALF_OPEN:
                self.figures["dependency_probes"] += 1
            for rate in self.plan.settings.get(i, (None, ()))[1]:
                if rate.kind is None or rate.kind == kind:
                    self._in_rate(f"dependency {i}", rate, at)

    def _in_key_rates(self, principal: str, tenant: str | None, kind: Kind, at: float) -> None:
        """A start under its fairness key's rates as they are now (a quota cleared drops them: none count after)."""
        quotas = self.world.quotas
        settings = [quotas.key_rates(principal), *([quotas.key_rates(principal, tenant)] if tenant else [])]
        for rate in key_rates_for([s for s in settings if s is not None], kind):
            self.figures["key_rated_starts"] += 1
            self._in_rate(rate.name, rate.rate, at)

    def _in_rate(self, whose: str, rate: Rate, at: float) -> None:
        times = self.starts[(whose, rate.applies_to)]
        times.insert(bisect_left(times, at), at)
        bound = rate.limit + rate.burst + RATE_MARGIN
        low = bisect_left(times, at - rate.period_s)  # windows of one period ending at or after this start
        for start in range(low, bisect_left(times, at) + 1):
            end = bisect_left(times, times[start] + rate.period_s)
            if end - start > bound:
                self.violations.add(
                    "starts on a rate's key stay within its limit + burst + 1 per period",
                    f"{whose} {rate.describe()}: {end - start} starts in {rate.period_s:g} s from {times[start]:.3f}",
                )
                return

    def final_figures(self) -> dict[str, int]:
        opened = sum(
            1
            for e in self.world.db.events.values()
            if e.event.type.value == "dependency.paused" and e.event.detail.get("by") == "breaker"
        )
        return {**self.figures, "dependency_breaker_opened": opened}
