"""Admission control: outstanding operations per principal, per site and in all, bounded at submit.

Each limit is a DynamoDB counter incremented in the same transaction that writes the operation row, conditional on
staying under its maximum, and decremented in the same transaction that makes the operation terminal. So a refusal
writes no operation and moves no counter (the site's registration and the staged input, both idempotent, stay), an
acceptance is counted exactly once, and nothing accepted is ever dropped to make room. An operator may override a
principal's limits (`Quota`, `sitedispatch quotas set`).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from sitedispatch.domain.errors import Backpressure, LimitReached
from sitedispatch.domain.model import Operation, Quota, lane_for
from sitedispatch.domain.ports import OperationStore, Slot
from sitedispatch.domain.resources import operation_lanes
from sitedispatch.domain.settings import Settings

GLOBAL = "global"
# The global limit is kept on shards, so no one item is written by every operation (DynamoDB takes ~1,000 writes a
# second per partition): an operation occupies the shard its id hashes to, each shard holding its share of the
# maximum. Sums are read only on a refusal and by the recount.
MAX_GLOBAL_SHARDS = 16
MIN_SHARD_CAPACITY = 500  # fewer shards for a small limit: a shard of a few operations would refuse early


def global_shards(maximum: int) -> int:
    return max(1, min(MAX_GLOBAL_SHARDS, maximum // MIN_SHARD_CAPACITY))


def global_counter(operation_id: str, shards: int) -> str:
    """The global shard an operation occupies (one shard: the single `global` counter)."""
    if shards <= 1:
        return GLOBAL
    return f"{GLOBAL}#{zlib.crc32(operation_id.encode()) % shards}"


def global_counters(shards: int) -> list[str]:
    return [GLOBAL] if shards <= 1 else [f"{GLOBAL}#{n}" for n in range(shards)]


def shard_maximum(maximum: int, shards: int) -> int:
    return -(-maximum // shards)


def global_outstanding(operations: OperationStore, settings: Settings) -> int:
    """Accepted, not yet terminal, in all: the sum of the global shards."""
    return sum(operations.counter(c) for c in global_counters(global_shards(settings.max_outstanding_global)))


RUNNING_PREFIX = "running#"
SHARE_PREFIX = "queued#"
# A principal's share of a lane's queue: at most this many of its operations per running slot are in the queue (or
# running) at once; the rest wait, accepted, and are sent oldest first as earlier ones finish. Two per slot keep its
# slots fed between a finish and the next send, and bound what another principal's message can find ahead of it.
SHARE_PER_RUNNING_SLOT = 2


def principal_counter(principal: str) -> str:
    return f"principal#{principal}"


def site_counter(site_id: str) -> str:
    return f"site#{site_id}"


def running_counter(lane: str, principal: str) -> str:
    return f"{RUNNING_PREFIX}{lane}#{principal}"


def share_counter(lane: str, principal: str) -> str:
    return f"{SHARE_PREFIX}{lane}#{principal}"


QUOTA_PREFIX = "quota#"  # a principal's override, kept beside its counters


def quota_key(principal: str) -> str:
    return f"{QUOTA_PREFIX}{principal}"


def max_running(settings: Settings, quota: Quota | None) -> int:
    override = quota.max_running if quota is not None else None
    return settings.max_running_per_principal if override is None else override


def max_outstanding(settings: Settings, quota: Quota | None) -> int:
    override = quota.max_outstanding if quota is not None else None
    return settings.max_outstanding_per_principal if override is None else override


def running_slot(settings: Settings, op: Operation) -> Slot:
    """Execution fairness: a principal runs at most `max_running_per_principal` attempts at once in each lane (or
    what an operator's quota put on its counter), so one tenant with many sites cannot occupy every execution
    environment of a lane."""
    return Slot(running_counter(lane_for(op.kind), op.principal), settings.max_running_per_principal)


def share_slot(settings: Settings, op: Operation) -> Slot:
    """Queue fairness: the share of its lane's queue the operation's principal may fill (a quota's max_running
    moves it, kept on the counter as its maximum)."""
    return Slot(
        share_counter(lane_for(op.kind), op.principal), SHARE_PER_RUNNING_SLOT * settings.max_running_per_principal
    )


def quota_bounds(principal: str, quota: Quota | None) -> dict[str, int | None]:
    """The counters a principal's quota bounds, and the maximum it puts on each (None: the deployment's)."""
    running = quota.max_running if quota else None
    return {
        principal_counter(principal): quota.max_outstanding if quota else None,
        **{running_counter(lane, principal): running for lane in operation_lanes()},
        **{
            share_counter(lane, principal): None if running is None else SHARE_PER_RUNNING_SLOT * running
            for lane in operation_lanes()
        },
    }


def counters_for(settings: Settings, op: Operation) -> tuple[str, ...]:
    """The counters an operation occupies from acceptance until it is terminal: the admission limits, and its
    principal's share of the lane once it is sent (one waiting for its share occupies none of it)."""
    admitted = (
        global_counter(op.operation_id, global_shards(settings.max_outstanding_global)),
        principal_counter(op.principal),
        site_counter(op.site_id),
    )
    return admitted if op.waiting_for else (*admitted, share_slot(settings, op).counter)


def is_admission_counter(counter_id: str) -> bool:
    return counter_id == GLOBAL or counter_id.startswith(
        (f"{GLOBAL}#", principal_counter(""), site_counter(""), RUNNING_PREFIX, SHARE_PREFIX)
    )


def recount(settings: Settings, outstanding: Iterable[Operation]) -> dict[str, int]:
    """What the admission, share and running counters must hold, from the operations that are not terminal."""
    expected: Counter[str] = Counter()
    for op in outstanding:
        expected.update(counters_for(settings, op))
        if op.running_slot:
            expected[op.running_slot] += 1
    return dict(expected)


def waiting_shares(outstanding: Iterable[Operation]) -> set[str]:
    """The share counters some of these operations wait for."""
    return {op.waiting_for for op in outstanding if op.waiting_for}


@dataclass(frozen=True)
class Limit:
    counter: str
    maximum: int
    name: str  # what the user is told: "site", "principal", "global"
    parallelism: int  # how many of these operations run at once (a site runs one at a time)


def limits_for(settings: Settings, op: Operation) -> tuple[Limit, ...]:
    """The deployment's limits (a store applies an operator's quota kept on a counter instead, see QuotaStore)."""
    shards = global_shards(settings.max_outstanding_global)
    return (
        Limit(
            global_counter(op.operation_id, shards),
            shard_maximum(settings.max_outstanding_global, shards),
            "global",
            settings.expected_concurrency,
        ),
        Limit(
            principal_counter(op.principal),
            settings.max_outstanding_per_principal,
            "principal",
            settings.max_running_per_principal,
        ),
        Limit(site_counter(op.site_id), settings.max_queued_per_site, "site", 1),
    )


def estimated_wait_s(ahead: int, operation_seconds: float, parallelism: int = 1) -> float:
    """How long work waits behind `ahead` operations run `parallelism` at a time, each taking `operation_seconds`:
    it starts when a slot frees, after ahead // parallelism rounds (with fewer ahead than slots, at once)."""
    return round((max(ahead, 0) // max(parallelism, 1)) * operation_seconds, 1)


def backpressure(limit: Limit, full: LimitReached, operation_seconds: float) -> Backpressure:
    """The refusal users get: which limit, how full, when to retry and how long work now waits.

    estimated_delay_s: the backlog ahead, run `parallelism` at a time, at the measured time per operation;
    retry_after_s: about one operation time, when one slot of this limit frees up.
    """
    value = full.value
    estimated = estimated_wait_s(max(value, limit.parallelism), operation_seconds, limit.parallelism)
    retry_after = round(max(1.0, operation_seconds), 1)
    return Backpressure(
        f"{limit.name} limit reached: {value} of {full.maximum} outstanding operations; retry in about "
        f"{retry_after:g}s (work queued now would wait about {estimated:g}s)",
        limit=limit.name,
        value=value,
        maximum=full.maximum,
        retry_after_s=retry_after,
        estimated_delay_s=estimated,
    )
