"""Dependencies: what many sites share (a database cluster, a PHP pool, a CDN's purge quota), named by id on each
site that uses it, with an operator's concurrency cap and rate limits, and a circuit breaker.

A dependency with no settings limits nothing and is never read twice: its item is absent. Its breaker opens on
failures of the destination spread over its sites (a site's own failures pause that site: `auto_pause_failures`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import Kind

# Ids are "TYPE:NAME": a short lowercase type (db, php, cache, cdn, api) and a name; no "#" (counters' separator).
DEPENDENCY_ID = re.compile(r"^[a-z][a-z0-9]{0,15}:[a-z0-9][a-z0-9._-]{0,62}$")
MAX_DEPENDENCIES_PER_SITE = 4
MAX_RATES = 6  # per dependency: one for all kinds and one per kind at most
MAX_STARTS_PER_S = 100.0  # a rate's bucket is written once per start it allows: kept far under one item's throughput
ALL_KINDS = "all"
BREAKER = "breaker"  # who opened or closed a dependency, when not an operator (its probe closes it)


class BreakerState(StrEnum):
    CLOSED = "closed"  # work starts (within its cap and rates)
    OPEN = "open"  # failures of the dependency opened it: nothing starts until `reopen_at`, then one probe
    HALF_OPEN = "half_open"  # one probe attempt runs; its success closes it, its failure opens it again
    PAUSED = "paused"  # an operator paused it: nothing starts until an operator resumes it

    @property
    def blocks(self) -> bool:
        return self != BreakerState.CLOSED


def dependency_id(value: object) -> str:
    """A dependency id as given, checked (InvalidInput names what is wrong)."""
    if not isinstance(value, str) or not DEPENDENCY_ID.match(value):
        raise InvalidInput(
            f"dependency id {value!r} is not TYPE:NAME (lowercase: a type of letters and digits, a name of letters, "
            "digits, '.', '_' or '-', e.g. db:cluster-7)",
            field="dependencies",
        )
    return value


def site_dependencies(values: object) -> tuple[str, ...]:
    """The dependencies a site names: distinct, checked, at most MAX_DEPENDENCIES_PER_SITE, in the order given."""
    if not isinstance(values, list | tuple):
        raise InvalidInput("dependencies must be a list of dependency ids", field="dependencies")
    ids = tuple(dict.fromkeys(dependency_id(value) for value in values))
    if len(ids) > MAX_DEPENDENCIES_PER_SITE:
        raise InvalidInput(
            f"a site names at most {MAX_DEPENDENCIES_PER_SITE} dependencies ({len(ids)} given)", field="dependencies"
        )
    return ids


@dataclass(frozen=True)
class Rate:
    """At most `limit` starts per `period_s` on a dependency (of one kind, or of all), `burst` of them at once:
    GCRA, one start every `interval_s`, up to `burst` ahead of that pace. Starts in any window of W seconds are at
    most W / interval_s + burst."""

    limit: int
    period_s: float
    burst: int = 1
    kind: Kind | None = None

    def __post_init__(self) -> None:
        if self.limit < 1 or self.period_s <= 0 or self.burst < 1:
            raise InvalidInput("a rate needs limit >= 1, period_s > 0 and burst >= 1", field="rates")
        if self.limit / self.period_s > MAX_STARTS_PER_S:
            raise InvalidInput(f"a rate is at most {MAX_STARTS_PER_S:g} starts a second", field="rates")

    @property
    def interval_s(self) -> float:
        return self.period_s / self.limit

    @property
    def applies_to(self) -> str:
        return self.kind.value if self.kind is not None else ALL_KINDS

    def describe(self) -> str:
        return f"{self.limit} per {_period(self.period_s)} (burst {self.burst}, {self.applies_to})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.applies_to, "limit": self.limit, "period_s": self.period_s, "burst": self.burst}

    @staticmethod
    def from_dict(raw: dict[str, Any]) -> Rate:
        kind = raw.get("kind") or ALL_KINDS
        return Rate(
            int(raw["limit"]),
            float(raw["period_s"]),
            int(raw.get("burst") or 1),
            None if kind == ALL_KINDS else Kind(kind),
        )

    def allowed_at(self, tat: float | None, now: float) -> float:
        """When a start is allowed, given the bucket's theoretical arrival time `tat` (None: never used)."""
        if tat is None:
            return now
        return max(now, tat - (self.burst - 1) * self.interval_s)

    def after_start(self, tat: float | None, at: float) -> float:
        """The bucket's theoretical arrival time after a start at `at` (allowed then)."""
        return max(tat if tat is not None else at, at) + self.interval_s


def _period(seconds: float) -> str:
    for unit, size in (("day", 86_400.0), ("hour", 3_600.0), ("minute", 60.0)):
        if seconds == size:
            return unit
    return f"{seconds:g} s"


@dataclass(frozen=True)
class Dependency:
    """A dependency's settings (an operator's) and its breaker's state."""

    dependency_id: str
    max_running: int | None = None  # attempts running at once on it, across every principal and lane
    rates: tuple[Rate, ...] = ()
    state: BreakerState = BreakerState.CLOSED
    reason: str | None = None  # why it is open or paused
    changed_by: str | None = None  # who set the state last (an operator, or the breaker)
    changed_at: float | None = None
    reopen_at: float | None = None  # open: when a probe may start
    cooldown_s: float | None = None  # open: the cooldown it waits (doubled by each failed probe)
    probe: str | None = None  # half open: the probing operation
    probe_at: float | None = None
    evidence: tuple[dict[str, Any], ...] = ()  # the failures that opened it (site, operation, code), newest last
    settings_by: str | None = None  # who set the cap and rates last, why and when
    settings_reason: str | None = None
    settings_at: float | None = None
    principals: frozenset[str] = field(default_factory=frozenset)  # whose sites name it: who its events go to
    sites: frozenset[str] = field(default_factory=frozenset)  # the sites naming it

    @property
    def configured(self) -> bool:
        return self.max_running is not None or bool(self.rates)

    def rates_for(self, kind: Kind) -> tuple[Rate, ...]:
        return tuple(rate for rate in self.rates if rate.kind is None or rate.kind == kind)

    def with_settings(
        self, max_running: int | None, rates: tuple[Rate, ...], by: str, reason: str, now: float
    ) -> Dependency:
        return replace(
            self, max_running=max_running, rates=rates, settings_by=by, settings_reason=reason, settings_at=now
        )


@dataclass(frozen=True)
class KeyRates:
    """An operator's rates on a fairness key's starts (through quotas): a principal's (every tenant of it: `tenant`
    None) or one tenant's; each rate for all kinds or one. Enforced at start, as a dependency's rates are."""

    principal: str
    tenant: str | None
    rates: tuple[Rate, ...]
    by: str = ""
    at: float = 0.0
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rates": [r.to_dict() for r in self.rates], "by": self.by, "at": self.at, "reason": self.reason}

    @staticmethod
    def from_dict(principal: str, tenant: str | None, raw: dict[str, Any]) -> KeyRates:
        rates = tuple(Rate.from_dict(r) for r in raw.get("rates") or ())
        return KeyRates(principal, tenant, rates, raw.get("by") or "", float(raw.get("at") or 0.0), raw.get("reason"))

    @property
    def name(self) -> str:
        return self.principal if self.tenant is None else f"{self.principal} (tenant {self.tenant})"


def checked_rates(rates: tuple[Rate, ...]) -> tuple[Rate, ...]:
    """At most one rate per kind (and one for all kinds), at most MAX_RATES."""
    kinds = [rate.applies_to for rate in rates]
    if len(set(kinds)) != len(kinds):
        raise InvalidInput("one rate per kind (and one for all kinds) at most", field="rates")
    if len(rates) > MAX_RATES:
        raise InvalidInput(f"at most {MAX_RATES} rates per dependency", field="rates")
    return rates


@dataclass(frozen=True)
class DependencyReading:
    """What one delivery read of its site's dependencies: their items (absent: no settings, closed), the attempts
    running on each (summed over its shards) and the theoretical arrival times of their rate buckets."""

    dependencies: Mapping[str, Dependency]
    running: Mapping[str, int] = field(default_factory=dict)
    tats: Mapping[str, float] = field(default_factory=dict)  # bucket -> its TAT (absent: never used)

    def dependency(self, dependency_id: str) -> Dependency:
        return self.dependencies.get(dependency_id) or Dependency(dependency_id)


@dataclass(frozen=True)
class RateTake:
    """A start taking its place in a rate bucket: written `after` where the bucket still holds `read`."""

    counter: str
    read: float | None
    after: float


@dataclass(frozen=True)
class DependencyTake:
    """What an attempt's start takes of its site's dependencies, in its claim's transaction: a place on a running
    shard of each capped one (`slots`, under its part of the cap), the breaker's flag checked on a running shard
    of each uncapped one (`gates`), and its rate places. Each is conditional; any refused writes nothing."""

    slots: tuple[Any, ...] = ()  # domain.ports.Slot
    gates: tuple[str, ...] = ()
    rates: tuple[RateTake, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.slots or self.gates or self.rates)

    def keeping_slots(self) -> DependencyTake:
        """What a start that keeps the slots its row holds (an attempt that died holding them) takes: no new slot;
        the breaker's gates and the rates still apply."""
        return DependencyTake((), self.gates, self.rates)


class DependencyRefused(Exception):
    """A claim's condition on a dependency's item failed (its breaker was set, a rate's bucket moved since it was
    read): nothing was written; the delivery reads the dependency again."""

    def __init__(self, counter: str) -> None:
        super().__init__(f"{counter} changed since it was read")
        self.counter = counter
