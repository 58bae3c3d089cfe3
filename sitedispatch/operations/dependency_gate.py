"""The operations worker's gate on a site's dependencies, before the claim: what the start takes of them (a running
shard of each capped one, a look at each breaker, its rate places), or the deferral that says why not now; the
probe of a half open breaker, and what its commit closes. Decided in `flow/dependencies.py`; taken in the claim."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol, TypeVar

from sitedispatch import observability as obs
from sitedispatch.domain.delivery import Outcome, Result
from sitedispatch.domain.dependencies import BREAKER, DependencyReading, DependencyTake, KeyRates
from sitedispatch.domain.errors import LimitReached
from sitedispatch.domain.model import HeldDelivery, Kind, Operation, Site, lane_for
from sitedispatch.domain.ports import DependencyStore, OperationQueue, OperationStore, Visibility
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.counters import SEPARATOR
from sitedispatch.flow.dependencies import (
    DependencyClaim,
    Probe,
    Reserve,
    Wait,
    cap_wait,
    decide,
    home_shard,
    key_rates_for,
    slot_dependency,
    take_on,
    wake_held,
)
from sitedispatch.flow.placement import reached, roomiest

PLACEMENT_TRIES = 8  # shards of a capped dependency a start tries before it waits
T = TypeVar("T")
Defer = Callable[[Visibility, float, str], Result]


class GateDeps(Protocol):
    settings: Settings
    operations: OperationStore
    dependencies: DependencyStore
    queue: OperationQueue
    rng: random.Random


class DependencyGate:
    """One delivery at a time (a worker's): `begin` it, then `decide`; what it probes is kept until its end."""

    def __init__(self, deps: GateDeps, defer: Defer) -> None:
        self.deps, self.defer = deps, defer
        self.receive_count = 1  # SQS's, of the delivery: how long a full cap's wait is
        self.probing: tuple[str, ...] = ()  # the dependencies this delivery's attempt probes (half open)
        self.key_rates: tuple[KeyRates, ...] = ()
        # The kind this delivery's start was held for alone (every rate that reserved its later place is of its
        # kind): the set's work of another kind need not wait behind it (the worker hands its share place over).
        # A cap, a pause, an open breaker, a probe or a rate of all kinds hold every start of the set alike.
        self.held_kind: Kind | None = None

    def begin(self, receive_count: int, key_rates: tuple[KeyRates, ...] = ()) -> None:
        """A new delivery: SQS's receive count, and the rates an operator put on its fairness key (as read with it)."""
        self.receive_count, self.probing, self.key_rates = receive_count, (), key_rates
        self.held_kind = None

    def decide(self, op: Operation, site: Site, visibility: Visibility, now: float) -> DependencyClaim | Result | None:
        """What a start takes of its site's dependencies and of its fairness key's rates (None: none apply, or the
        attempt continues), or the deferral that says why not now: a full cap, a breaker open or paused, a rate
        reserved ahead."""
        d = self.deps
        rated = key_rates_for(self.key_rates, op.kind)
        if not (site.dependencies or rated) or op.continues:
            return None
        s = d.settings
        buckets = [k.counter for k in rated]
        for _ in range(2):  # a probe elected reads again (its own election is then what it sees)
            if site.dependencies:
                reading = d.dependencies.read(site.dependencies, op.kind, buckets)
            else:
                reading = DependencyReading({}, {}, d.dependencies.buckets(buckets))
            decision = decide(
                op,
                site.dependencies,
                reading,
                now,
                cap_wait_s=cap_wait(site.avg_operation_s, self.receive_count, s.defer_max_s),
                paused_wait_s=s.pause_deferral_s,
                probe_timeout_s=s.dependency_probe_timeout_s,
                key_rates=rated,
            )
            if isinstance(decision, Probe):
                if not d.dependencies.elect_probe(
                    decision.dependency_id, op.operation_id, now, s.dependency_probe_timeout_s
                ):
                    return self.defer(visibility, s.defer_max_s, "dependency_probing")
                obs.logger.info("probing dependency", extra={"dependency": decision.dependency_id})
                self.probing = (*self.probing, decision.dependency_id)
                continue
            if isinstance(decision, Wait):
                obs.logger.info("waiting for a dependency", extra={"why": decision.why})
                return self._held(op, decision.dependency_id, visibility, now, decision.reason, decision.seconds)
            if isinstance(decision, Reserve):
                return self._reserve(op, decision, visibility, now)
            return decision
        return self.defer(visibility, 1.0, "dependency_changed")

    def _reserve(self, op: Operation, decision: Reserve, visibility: Visibility, now: float) -> Result:
        """The rates allow the start only later: its places taken now, the row says when, one wait until then."""
        d = self.deps
        if not d.operations.reserve_rates(op, decision.rates, decision.at, now):
            return self.defer(visibility, 1.0, "dependency_changed")
        obs.logger.info("rate place reserved", extra={"why": decision.why})
        if all(rate.counter.rsplit(SEPARATOR, 1)[-1] == op.kind.value for rate in decision.rates):
            self.held_kind = op.kind
        # never before its time, and late by at most a quarter of what keeps its places (a long wait's jitter must
        # not outlast the reservation: a place missed is a start the rate allowed and nobody took)
        wait = max(decision.at - now, 0.0) + 0.25 * decision.honoured_s * d.rng.random()
        visibility.change(wait)
        obs.count(obs.Metric.OperationDeferred)
        return Result(Outcome.DEFERRED, "dependency_rate", delay_s=wait)

    def on_shards(
        self, gate: DependencyClaim | None, operation_id: str, attempt: Callable[[DependencyTake | None], T]
    ) -> T:
        """`attempt(take)` on each capped dependency's home shard, then on the roomiest shard of the one refused
        (read again), until a shard of each takes it or one is full (LimitReached naming it)."""
        if gate is None:
            return attempt(None)
        d = self.deps
        chosen = [home_shard(group, operation_id) for group in gate.groups]
        for _ in range(PLACEMENT_TRIES):
            try:
                return attempt(take_on(gate, chosen))
            except LimitReached as full:
                at = next((i for i, g in enumerate(gate.groups) if g.index_of(full.counter) is not None), None)
                if at is None:
                    raise
                other = roomiest(d.operations, gate.groups[at])
                if other is None:
                    raise
                chosen[at] = other
        raise reached(d.operations, gate.groups[0])

    def full(self, op: Operation, site: Site, visibility: Visibility, full: LimitReached, now: float) -> Result:
        obs.logger.info("dependency at its cap", extra={"counter": full.counter, "running": full.value})
        wait = cap_wait(site.avg_operation_s, self.receive_count, self.deps.settings.defer_max_s)
        return self._held(op, slot_dependency(full.counter), visibility, now, "dependency_cap", wait)

    def _held(
        self, op: Operation, dependency_id: str, visibility: Visibility, now: float, reason: str, seconds: float
    ) -> Result:
        """The deferral, and the delivery kept with the dependency that holds it: the next end of an attempt on it
        (a full cap) or its resume makes it visible at once. Not kept (beyond HELD_KEPT, or a failure, logged): it
        comes back when its deferral ends, as it would anyway."""
        deferred = self.defer(visibility, seconds, reason)
        if dependency_id and visibility.receipt:
            try:
                held = HeldDelivery(op.operation_id, lane_for(op.kind), visibility.receipt)
                self.deps.dependencies.hold(dependency_id, held, now)
            except Exception as exc:
                obs.logger.warning("could not keep the delivery with its dependency", extra={"error": repr(exc)})
        return deferred

    def released(self, op: Operation) -> None:
        """An attempt that held places of capped dependencies ended (or goes back to wait for a retry): the oldest
        start each holds in this lane is woken to take the place now. (Another lane's come back in their time: a
        worker changes the visibility of its own lane's messages only.)"""
        lane = lane_for(op.kind)
        for dependency_id in sorted({slot_dependency(counter) for counter in op.dependency_slots}):
            try:
                wake_held(self.deps.dependencies, self.deps.queue, dependency_id, lane, 1)
            except Exception as exc:
                obs.logger.warning("could not wake a start the dependency held", extra={"error": repr(exc)})

    def probes_succeeded(self, op: Operation, now: float) -> None:
        """The attempt that probed a half open dependency committed: it closes (its event with it). A failure here
        leaves it half open; the next probe, once this one is quiet, closes it."""
        for dependency_id in self.probing:
            try:
                if self.deps.dependencies.resume(dependency_id, BREAKER, now, probe=op.operation_id) is not None:
                    obs.logger.info("dependency closed by its probe", extra={"dependency": dependency_id})
                    wake_held(self.deps.dependencies, self.deps.queue, dependency_id, lane_for(op.kind))
            except Exception as exc:
                obs.logger.warning("could not close the dependency", extra={"error": repr(exc)})


def is_dependencys(gate: DependencyClaim | None, full: LimitReached) -> bool:
    """Whether the limit a start met is one of its dependencies' caps (else its own fairness key's)."""
    return gate is not None and any(g.index_of(full.counter) is not None for g in gate.groups)


def ungrouped(gate: DependencyClaim | None) -> DependencyTake | None:
    """A start keeping the slots its row holds: the breaker's gates and the rates only."""
    return None if gate is None else take_on(gate, [0] * len(gate.groups)).keeping_slots()
