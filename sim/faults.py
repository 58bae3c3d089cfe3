"""Faults at every port call, chosen by the seed (swarm testing: each seed enables its own mix of fault kinds at its
own rates, so rare combinations get explored), and the gate every port of the core is wrapped in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from botocore.exceptions import ClientError

from .scheduler import Crash, Scheduler

CRASH_BEFORE = "crash_before"  # the actor dies before the call: nothing of it happened
CRASH_AFTER = "crash_after"  # the call happened (durable), then the actor died: it never learns the answer
TRANSIENT = "transient"  # throttled, a 5xx, a transaction conflict: the call did not happen and says so
PAUSE = "pause"  # the actor stalls past its lease (and maybe its message's visibility), then goes on
CALL_FAULTS = (CRASH_BEFORE, CRASH_AFTER, TRANSIENT, PAUSE)
# Faults of the queues and the indexes, not of one call (queues.py and fleet.py draw them)
LOST_DELETE = "lost_delete"  # a processed message's delete never reached SQS: it comes back after its visibility
LOST_SEND = "lost_send"  # an event's message, sent after its transition committed, is lost with its sender
REPLAY = "replay"  # an old message sent again later (a producer's retry past the dedup window, a stray copy)
INDEX_LAG = "index_lag"  # index reads see the rows as they were a while ago
QUEUE_FAULTS = (LOST_DELETE, LOST_SEND, REPLAY, INDEX_LAG)
ERROR_CODES = ("ThrottlingException", "ProvisionedThroughputExceededException", "InternalServerError",
               "TransactionConflict", "SlowDown", "ServiceUnavailable")  # fmt: skip


@dataclass
class FaultPlan:
    """Which faults this seed enables and how often; `on` is False once the faults stop (the settle phase)."""

    rates: dict[str, float]
    rng: Random
    pause_s: tuple[float, float] = (1.0, 2.0)
    on: bool = True
    counts: Counter[str] = field(default_factory=Counter)

    @classmethod
    def swarm(cls, rng: Random, lease_s: float) -> FaultPlan:
        kinds = [kind for kind in CALL_FAULTS + QUEUE_FAULTS if rng.random() < 0.5]
        scale = rng.choice((0.002, 0.01, 0.03))
        rates = {kind: scale * rng.uniform(0.2, 1.0) for kind in kinds}
        for kind in (LOST_DELETE, LOST_SEND):  # drawn per message, not per call: a higher rate
            if kind in rates:
                rates[kind] = min(0.3, rates[kind] * 10)
        return cls(rates, rng, pause_s=(lease_s * 1.05, lease_s * 3.0))

    def drawn(self, kind: str) -> bool:
        rate = self.rates.get(kind, 0.0)
        if not self.on or rate == 0.0 or self.rng.random() >= rate:
            return False
        self.counts[kind] += 1
        return True

    def call_fault(self) -> str | None:
        if not self.on:
            return None
        for kind in CALL_FAULTS:
            if self.drawn(kind):
                return kind
        return None

    def describe(self) -> str:
        return ", ".join(f"{kind} {rate:.3f}" for kind, rate in sorted(self.rates.items())) or "no faults"


def transient_error(operation: str, rng: Random) -> ClientError:
    """What an AWS adapter lets through when a service refuses a call for now."""
    code = rng.choice(ERROR_CODES)
    return ClientError({"Error": {"Code": code, "Message": "injected by the simulation"}}, operation)


class Gate:
    """Wraps one port: every public method call is a scheduling point and a place for a fault."""

    def __init__(
        self, name: str, port: Any, scheduler: Scheduler, faults: FaultPlan, seen: Callable[..., None] | None = None
    ) -> None:
        self._name, self._port, self._scheduler, self._faults, self._seen = name, port, scheduler, faults, seen

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._port, attr)
        if attr.startswith("_") or not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            label = f"{self._name}.{attr}"
            actor = self._scheduler.point(label)
            if actor is None:
                return target(*args, **kwargs)
            fault = self._faults.call_fault()
            if fault is not None:
                self._scheduler.trace.add(f"  fault {fault}")
            if fault == CRASH_BEFORE:
                actor.dead = True
                raise Crash
            if fault == TRANSIENT:
                raise transient_error(label, self._faults.rng)
            if fault == PAUSE:
                self._scheduler.park(actor, self._scheduler.clock.now() + self._faults.rng.uniform(*self._faults.pause_s))
            result = target(*args, **kwargs)
            if self._seen is not None:
                self._seen(actor, label, args, result)
            if fault == CRASH_AFTER:
                actor.dead = True
                raise Crash
            return result

        return call
