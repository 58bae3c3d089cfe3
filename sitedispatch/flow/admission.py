"""Admission control: outstanding operations in all, per principal, per tenant and per site, bounded at submit.

Each limit is a group of counters (flow/counters.py) moved in the same transaction that writes the operation row,
conditional on staying under the shard's part of the maximum, and moved back in the same transaction that makes
the operation terminal. So a refusal writes no operation and moves no counter (the site's registration and the
staged input, both idempotent, stay), an acceptance is counted exactly once, and nothing accepted is ever dropped
to make room. An operator may override a principal's or one of its tenants' limits (`Quota`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sitedispatch.domain.errors import Backpressure, LimitReached
from sitedispatch.domain.model import Operation, QueueMessage, Quota, lane_for
from sitedispatch.domain.resources import operation_lanes
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.counters import (
    Group,
    global_group,
    principal_group,
    running_group,
    share_group,
    share_label,
    site_counter,
    tenant_group,
)


@dataclass(frozen=True)
class Limit:
    group: Group
    name: str  # what the user is told: "global", "principal", "tenant", "site"
    parallelism: int  # how many of these operations run at once (a site runs one at a time)
    placed_by: str  # what picks the home shard


def limits_for(settings: Settings, op: Operation) -> tuple[Limit, ...]:
    """The deployment's limits an operation is admitted under (a store applies an operator's quota kept on a
    counter instead). A tenant's own limit is counted only when the tenant is not the principal itself (the two
    would count the same operations)."""
    tenant = op.tenant_key
    limits = [
        Limit(global_group(settings.max_outstanding_global), "global", settings.expected_concurrency, op.operation_id),
        Limit(
            principal_group(op.principal, settings.max_outstanding_per_principal),
            "principal",
            settings.max_running_per_principal,
            op.operation_id,
        ),
    ]
    if tenant != op.principal:
        limits.append(
            Limit(
                tenant_group(op.principal, tenant, settings.max_outstanding_per_tenant),
                "tenant",
                settings.max_running_per_principal,
                op.operation_id,
            )
        )
    limits.append(Limit(Group(site_counter(op.site_id), settings.max_queued_per_site, 1), "site", 1, op.site_id))
    return tuple(limits)


def limit_of(limits: tuple[Limit, ...], counter: str) -> Limit:
    """The limit a refused counter (a shard, or a whole group) belongs to."""
    return next(limit for limit in limits if limit.group.name == counter or limit.group.index_of(counter) is not None)


def running_group_for(settings: Settings, op: Operation) -> Group:
    """Execution fairness: a fairness key runs at most `max_running_per_principal` attempts at once in each lane
    (or what an operator's quota put on its shards), so one tenant with many sites cannot occupy every execution
    environment of a lane."""
    return running_group(lane_for(op.kind), op.principal, op.tenant_key, settings.max_running_per_principal)


def share_group_for(settings: Settings, op: Operation, label: str | None = None) -> Group:
    """Queue fairness: the share of its lane's queue the operation's fairness key may fill with its sites' work on
    one dependency set (`label`: the site's, as its counter names it; by default the one the row's share or wait
    names)."""
    label = share_label(op.share or op.waiting_for) if label is None else label
    return share_group(lane_for(op.kind), op.principal, op.tenant_key, settings.max_running_per_principal, label)


def message_for(op: Operation) -> QueueMessage:
    """The operation's queue message, naming the dependency set of the share it holds a place of (so that the
    worker reads that share's shards with the operation)."""
    return QueueMessage.of(op, share_label(op.share or op.waiting_for))


def held_by(op: Operation) -> tuple[str, ...]:
    """Every counter an operation holds a place of, as its row records them: what its end releases."""
    running = (*((op.running_slot,) if op.running_slot else ()), *op.dependency_slots)
    return (*op.holds, *((op.share,) if op.share else ()), *running)


def quota_bounds(
    principal: str, tenant: str | None, quota: Quota | None, held: Mapping[str, int] | None = None
) -> dict[str, int | None]:
    """The counters a quota bounds, and the maximum it puts on each shard (None: the deployment's). A principal's
    own quota bounds its outstanding operations in all and its own work's running and share places; a tenant's
    bounds that tenant's. `held`: what each shard holds now (its parts cover that first: `Group.parts_around`)."""
    tenant_key = tenant or principal
    outstanding = quota.max_outstanding if quota else None
    running = quota.max_running if quota else None
    if tenant_key == principal:
        outstanding_group = principal_group(principal, outstanding or 0)
    else:
        outstanding_group = tenant_group(principal, tenant_key, outstanding or 0)
    groups: list[tuple[Group, bool]] = [(outstanding_group, outstanding is not None)]
    for lane in operation_lanes():
        groups.append((running_group(lane, principal, tenant_key, running or 0), running is not None))
        groups.append((share_group(lane, principal, tenant_key, running or 0), running is not None))
    bounds: dict[str, int | None] = {}
    for group, bounded in groups:
        parts = group.parts_around([(held or {}).get(counter, 0) for counter in group.shard_ids()])
        bounds.update({group.shard(k): parts[k] if bounded else None for k in range(group.shards)})
    return bounds


def max_running(settings: Settings, quota: Quota | None) -> int:
    override = quota.max_running if quota is not None else None
    return settings.max_running_per_principal if override is None else override


def max_outstanding(settings: Settings, quota: Quota | None, tenant: bool = False) -> int:
    override = quota.max_outstanding if quota is not None else None
    default = settings.max_outstanding_per_tenant if tenant else settings.max_outstanding_per_principal
    return default if override is None else override


def recount(outstanding: Iterable[Operation]) -> dict[str, int]:
    """What the flow counters must hold, from the operations that are not terminal: each holds what its row says."""
    expected: Counter[str] = Counter()
    for op in outstanding:
        expected.update(held_by(op))
    return dict(expected)


def waiting_shares(outstanding: Iterable[Operation]) -> set[tuple[str, str]]:
    """(share, a shard counting a wait) for what these operations wait for."""
    return {(op.waiting_for, op.waiting_at or op.waiting_for) for op in outstanding if op.waiting_for}


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


def paused_backpressure(refusal: Backpressure, site_id: str, reason: str | None, look_again_s: float) -> Backpressure:
    """A paused site's own bound refused: nothing of it starts before its resume, so the refusal says so, gives no
    estimate, and asks to look again after the pause's deferral (or to resume the site)."""
    return Backpressure(
        f"site {site_id} is paused: {reason or 'no reason given'}; its {refusal.value} of {refusal.maximum} "
        f"outstanding operations wait for its resume (resume the site, or retry in about {look_again_s:g}s)",
        limit=refusal.limit,
        value=refusal.value,
        maximum=refusal.maximum,
        retry_after_s=look_again_s,
        estimated_delay_s=None,
    )
