"""Faults at every port call, chosen by the seed (swarm testing: each seed enables its own mix of fault kinds at its
own rates, so rare combinations get explored), and the gate every port of the core is wrapped in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from botocore.exceptions import ClientError

from sitedispatch.domain.errors import TransientError

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
SWEEP_NOW = "sweep_now"  # the reconciler runs at this moment too (besides its schedule)
QUEUE_FAULTS = (LOST_DELETE, LOST_SEND, REPLAY, INDEX_LAG, SWEEP_NOW)
ERROR_CODES = ("ThrottlingException", "ProvisionedThroughputExceededException", "InternalServerError", "SlowDown",
               "ServiceUnavailable", "RequestLimitExceeded")  # fmt: skip
# What aws/conflicts.py raises once a transaction or a conditional S3 write met other writers past its patience
CONFLICT_CODES = {"operations": "transaction_conflict", "sites": "transaction_conflict",
                  "commits": "transaction_conflict", "publications": "transaction_conflict",
                  "events": "transaction_conflict", "blobs": "s3_conflict"}  # fmt: skip


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
        if SWEEP_NOW in rates:  # drawn at every step, and a sweep is some thirty steps
            rates[SWEEP_NOW] /= 10
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


def transient_error(port: str, operation: str, rng: Random) -> Exception:
    """What an AWS adapter lets through when a service refuses a call for now: the service's error (throttled, a
    5xx), or for a write that met other writers past the adapter's patience, its TransientError."""
    conflict = CONFLICT_CODES.get(port)
    if conflict is not None and rng.random() < 0.3:
        return TransientError(f"{operation} met other writers (injected by the simulation)", code=conflict)
    code = rng.choice(ERROR_CODES)
    return ClientError({"Error": {"Code": code, "Message": "injected by the simulation"}}, operation)


def subject(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What a call is about, for the trace: its first argument's operation or site (or the argument itself)."""
    if not args:
        return str(kwargs.get("status", ""))
    first = args[0]
    first = getattr(first, "commit", first)  # a prepared commit: its record
    for name in ("operation_id", "site_id", "event_id"):
        value = getattr(first, name, None)
        if isinstance(value, str):
            return value
    return first[:60] if isinstance(first, str) else ""


class Gate:
    """Wraps one port: every public method call is a scheduling point and a place for a fault."""

    def __init__(
        self,
        name: str,
        port: Any,
        scheduler: Scheduler,
        faults: FaultPlan,
        seen: Callable[..., None] | None = None,
        refuses: bool = True,  # False: the port answers every call (an HTTP sender reports a failure, never raises)
    ) -> None:
        self._name, self._port, self._scheduler, self._faults, self._seen = name, port, scheduler, faults, seen
        self._refuses = refuses

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._port, attr)
        if attr.startswith("_") or not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            label = f"{self._name}.{attr}"
            actor = self._scheduler.point(f"{label} {subject(args, kwargs)}")
            if actor is None:
                return target(*args, **kwargs)
            fault = self._faults.call_fault()
            if fault is not None:
                self._scheduler.trace.add(f"  fault {fault}")
            if fault == CRASH_BEFORE:
                actor.dead = True
                raise Crash
            if fault == TRANSIENT and self._refuses:
                raise transient_error(self._name, label, self._faults.rng)
            if fault == PAUSE:
                self._scheduler.park(
                    actor, self._scheduler.clock.now() + self._faults.rng.uniform(*self._faults.pause_s)
                )
            result = target(*args, **kwargs)
            if self._seen is not None:
                self._seen(actor, label, args, result)
            if fault == CRASH_AFTER:
                actor.dead = True
                raise Crash
            return result

        return call
