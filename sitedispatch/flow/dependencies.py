"""Whether an attempt may start on its site's dependencies now, and what its start takes of them.

Read once per delivery (one BatchGetItem: each dependency's item, its running shards and its rate buckets), decided
here, and taken in the claim's own transaction, each item conditional: a running shard under its part of the cap and
open (the breaker's flag is kept on every running shard, so no claim meets a single hot item), a rate bucket as read.
A start the rates do not allow yet reserves its place (the buckets move on, the row records when) and waits for it:
one deferral per start, never a poll of a full bucket.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sitedispatch.domain.dependencies import (
    BreakerState,
    Dependency,
    DependencyReading,
    DependencyTake,
    KeyRates,
    Rate,
    RateTake,
)
from sitedispatch.domain.model import Kind, Operation
from sitedispatch.domain.ports import DependencyStore, OperationQueue
from sitedispatch.flow.counters import DEPENDENCY_RUNNING, RUNNING_SHARDS, Group, key

DEPENDENCY = "dep"  # dep#ID: an operator's settings and the breaker's state
DEPENDENCY_RATE = "deprate"  # deprate#ID#KIND: a rate's bucket (its theoretical arrival time)
DEPENDENCY_FAILURES = "depfail"  # depfail#ID#WINDOW: failures of the destination in one breaker window
DEPENDENCY_HELD = "dephold"  # dephold#ID#LANE: the deliveries it holds, kept for the end or resume that wakes them
HELD_KEPT = 64  # deliveries kept a dependency and lane (beyond them a held start comes back in its own time)
DEPENDENCY_SHARDS = RUNNING_SHARDS
KEY_RATES = "keyrates"  # keyrates#P[#T]: an operator's rates on a fairness key (quotas set --rate)
KEY_RATE = "keyrate"  # keyrate#P#T#KIND (T empty: the principal's own, over all its tenants): a key rate's bucket


def dependency_key(dependency_id: str) -> str:
    return key(DEPENDENCY, dependency_id)


def running_group_of(dependency: Dependency) -> Group:
    """The cap's shards (an uncapped dependency's shards carry its breaker only)."""
    return Group(key(DEPENDENCY_RUNNING, dependency.dependency_id), dependency.max_running or 0, DEPENDENCY_SHARDS)


def running_shards(dependency_id: str) -> list[str]:
    return Group(key(DEPENDENCY_RUNNING, dependency_id), 0, DEPENDENCY_SHARDS).shard_ids()


def held_key(dependency_id: str, lane: str) -> str:
    return key(DEPENDENCY_HELD, dependency_id, lane)


def wake_held(
    dependencies: DependencyStore, queue: OperationQueue, dependency_id: str, lane: str, limit: int | None = None
) -> int:
    """Make visible now the `limit` oldest deliveries the dependency holds in `lane` (None: all, at its resume):
    a place of its cap freed is taken at once, not at a held start's next look. A receipt gone stale (its message
    received again since) wakes nothing: one more is taken in its stead, twice at most. How many were woken."""
    if limit is None:
        held = dependencies.take_held(dependency_id, lane)
        return queue.wake(lane, [h.receipt for h in held]) if held else 0
    woken = 0
    for _ in range(limit + 2):
        held = dependencies.take_held(dependency_id, lane, 1)
        if not held:
            break
        woken += queue.wake(lane, [held[0].receipt])
        if woken >= limit:
            break
    return woken


def slot_dependency(counter: str) -> str:
    """The dependency a running shard (`deprun#ID#k`, as a row's `dependency_slots` names it) is of."""
    return counter.split("#")[1]


def rate_key(dependency_id: str, rate: Rate) -> str:
    return key(DEPENDENCY_RATE, dependency_id, rate.applies_to)


def key_rates_key(principal: str, tenant: str | None) -> str:
    return key(KEY_RATES, principal) if tenant is None else key(KEY_RATES, principal, tenant)


def key_rates_keys(principal: str, tenant: str | None) -> list[str]:
    """The settings a delivery of (principal, tenant)'s work reads: the principal's, and its tenant's if it has one."""
    return [key_rates_key(principal, None), *([key_rates_key(principal, tenant)] if tenant else [])]


def key_rate_key(principal: str, tenant: str | None, rate: Rate) -> str:
    return key(KEY_RATE, principal, tenant or "", rate.applies_to)


@dataclass(frozen=True)
class KeyRate:
    """A fairness key's rate that applies to a start: its bucket, the rate, and whose it is (what a wait names)."""

    counter: str
    rate: Rate
    name: str


def key_rates_for(settings: Sequence[KeyRates], kind: Kind) -> tuple[KeyRate, ...]:
    """The rates of a key's settings that apply to a start of `kind`."""
    return tuple(
        KeyRate(key_rate_key(s.principal, s.tenant, rate), rate, s.name)
        for s in settings
        for rate in s.rates
        if rate.kind is None or rate.kind == kind
    )


def failures_key(dependency_id: str, window: int) -> str:
    return key(DEPENDENCY_FAILURES, dependency_id, str(window))


def home_shard(group: Group, placed_by: str) -> int:
    """The shard a start tries first: one with a part of the cap (a cap below the shard count leaves some empty)."""
    with_room = min(group.shards, group.maximum) if group.maximum > 0 else group.shards
    return zlib.crc32(placed_by.encode()) % with_room


@dataclass(frozen=True)
class DependencyClaim:
    """What a start takes in its claim transaction: a running place on each capped dependency (a group, placed on
    a shard by the caller), the breaker's flag checked on one shard of each uncapped one, and the rate places."""

    groups: tuple[Group, ...] = ()
    gates: tuple[str, ...] = ()  # a running shard of each uncapped dependency: its breaker flag is checked
    rates: tuple[RateTake, ...] = ()
    names: Mapping[str, str] = field(default_factory=dict)  # group name -> dependency id (what a refusal names)


@dataclass(frozen=True)
class Wait:
    """Not now: come back in `seconds` (`why` is what the operation says; `reason`, the deferral's metric)."""

    seconds: float
    why: str
    reason: str
    dependency_id: str = ""  # the one that holds it (its end or resume wakes it); empty: a rate's


@dataclass(frozen=True)
class Reserve:
    """The rates allow this start only at `at`: take those places now, record it on the row, and wait until then."""

    at: float
    rates: tuple[RateTake, ...]
    why: str
    honoured_s: float = 0.0  # how late it may start and keep its places: the shortest interval of its rates


@dataclass(frozen=True)
class Probe:
    """An open breaker's cooldown has passed: this start may become its one probe (elected conditionally)."""

    dependency_id: str


Decision = DependencyClaim | Wait | Reserve | Probe


def decide(
    op: Operation,
    dependency_ids: Sequence[str],
    reading: DependencyReading,
    now: float,
    *,
    cap_wait_s: float,
    paused_wait_s: float,
    probe_timeout_s: float,
    key_rates: Sequence[KeyRate] = (),
) -> Decision:
    """Whether `op` may start now on its dependencies (in the order the site names them) and its fairness key's
    rates, and what it takes."""
    groups: list[Group] = []
    gates: list[str] = []
    names: dict[str, str] = {}
    for dependency_id in dependency_ids:
        dependency = reading.dependency(dependency_id)
        blocked = _breaker(dependency, op.operation_id, now, paused_wait_s, probe_timeout_s)
        if blocked is not None:
            return blocked
        if dependency.max_running is not None:
            running = reading.running.get(dependency_id, 0)
            if running >= dependency.max_running:
                why = running_why(dependency_id, running, dependency.max_running)
                return Wait(cap_wait_s, why, "dependency_cap", dependency_id)
            group = running_group_of(dependency)
            groups.append(group)
            names[group.name] = dependency_id
        else:
            gates.append(running_shards(dependency_id)[home_shard(running_group_of(dependency), op.operation_id)])
    takes, at, slowest = _rates(op, dependency_ids, reading, now, key_rates)
    if at > now:
        assert slowest is not None
        return Reserve(at, takes, rate_why(slowest[0], slowest[1], at - now), _shortest_interval(at, takes))
    return DependencyClaim(tuple(groups), tuple(gates), takes, names)


def _breaker(
    dependency: Dependency, operation_id: str, now: float, paused_wait_s: float, probe_timeout_s: float
) -> Wait | Probe | None:
    state = dependency.state
    name = dependency.dependency_id
    if state == BreakerState.PAUSED:
        return Wait(
            paused_wait_s,
            f"dependency {name} paused: {dependency.reason or 'no reason given'}",
            "dependency_paused",
            name,
        )
    if state == BreakerState.OPEN:
        reopen_at = dependency.reopen_at or now
        if reopen_at <= now:
            return Probe(name)
        return Wait(reopen_at - now, open_why(dependency, reopen_at - now), "dependency_open", name)
    if state == BreakerState.HALF_OPEN and dependency.probe != operation_id:
        probe_ends = (dependency.probe_at or now) + probe_timeout_s
        if probe_ends <= now:
            return Probe(name)  # the probe went quiet: another may take its place
        return Wait(
            min(probe_ends - now, paused_wait_s),
            f"dependency {name} half open: a probe runs",
            "dependency_probing",
            name,
        )
    return None


def _shortest_interval(at: float, takes: Sequence[RateTake]) -> float:
    """The shortest interval of the rates a reservation at `at` takes (each moved its bucket on by one)."""
    return min((t.after - max(at if t.read is None else t.read, at) for t in takes), default=0.0)


def _rates(
    op: Operation,
    dependency_ids: Sequence[str],
    reading: DependencyReading,
    now: float,
    key_rates: Sequence[KeyRate] = (),
) -> tuple[tuple[RateTake, ...], float, tuple[str, Rate] | None]:
    """The rate places this start takes, the earliest time all its rates allow it (a reservation it holds counts
    while it is at most one interval old), and the rate that decided that time (named by what it limits)."""
    applying = [
        (rate_key(dependency_id, rate), rate, f"dependency {dependency_id}")
        for dependency_id in dependency_ids
        for rate in reading.dependency(dependency_id).rates_for(op.kind)
    ]
    applying += [(k.counter, k.rate, k.name) for k in key_rates]
    wanted: list[tuple[str, Rate, float | None]] = []
    at = now
    slowest: tuple[str, Rate] | None = None
    for counter, rate, name in applying:
        reserved = op.rate_reserved.get(counter)
        if reserved is not None and reserved <= now < reserved + rate.interval_s:
            continue  # its place was taken when it was reserved
        tat = reading.tats.get(counter)
        allowed = rate.allowed_at(tat, now)
        if allowed > at:
            at, slowest = allowed, (name, rate)
        wanted.append((counter, rate, tat))
    takes = tuple(RateTake(counter, tat, rate.after_start(tat, at)) for counter, rate, tat in wanted)
    return takes, at, slowest


def running_why(dependency_id: str, running: int, cap: int) -> str:
    return f"dependency {dependency_id}: {running} of {cap} running"


def rate_why(whose: str, rate: Rate, in_s: float) -> str:
    return f"rate of {whose} ({rate.describe()}): next start in {max(in_s, 0):.0f} s"


def open_why(dependency: Dependency, in_s: float) -> str:
    return (
        f"dependency {dependency.dependency_id} open: {dependency.reason or 'failures'}; "
        f"a probe in {max(in_s, 0):.0f} s"
    )


def cap_wait(avg_operation_s: float | None, receive_count: int, longest_s: float) -> float:
    """How long a start waits for a full cap: about one operation time at first, doubling with each look (the
    message's receive count), at most `longest_s`: a long wait is a few looks a minute, not a poll."""
    first = min(avg_operation_s or longest_s, longest_s)
    return min(first * 2 ** min(max(receive_count - 1, 0), 10), longest_s)


def take_on(claim: DependencyClaim, chosen: Sequence[int]) -> DependencyTake:
    """The claim with its capped groups placed on shards `chosen` (one per group)."""
    slots = tuple(group.slot(k) for group, k in zip(claim.groups, chosen, strict=True))
    return DependencyTake(slots, claim.gates, claim.rates)
