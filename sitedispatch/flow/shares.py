"""A fairness key's share of a lane's queue: what waits for it is sent, oldest first, as earlier work finishes.

Why: the running cap alone keeps a fairness key (a principal, or a tenant it names) from occupying every execution
environment, but not from filling the FIFO queue. A flood of one key's messages sits ahead of everyone else's, and
each of them is received and deferred (over its cap) before a newcomer's message is reached: a newcomer waited one
pass over the flood. With a share, at most SHARE_PER_RUNNING_SLOT x its running cap of a key's operations are in a
lane's queue at once; the rest are accepted and wait in the operations table (the sparse by-waiting index), so what
another key's message finds ahead of it is bounded by the number of keys, not by the size of anyone's backlog.

A key has a share per set of dependencies its sites name (flow/counters.py `share_group`; the set is kept on the
site's counter, which moves it only while nothing of the site is outstanding): work a dependency holds fills its
own set's share, never another's. The share is kept on shards placed by site, so a site's operations wait in order
on one shard.
Who releases: whoever ends an operation that held a place, when its delivery read showed others waiting (the worker:
no extra read, the share's shards come in the same BatchGetItem as the operation), an operator's cancel, and the
reconciler's sweep (for a release a race left undone: a finish whose read saw no one waiting yet). A release gives
the place that freed to the oldest waiting operation of the share, whatever shard counted its wait.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from sitedispatch import observability as obs
from sitedispatch.domain.model import Kind, Operation, lane_for
from sitedispatch.domain.ports import Clock, OperationQueue, OperationStore, Slot
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import message_for, share_group_for
from sitedispatch.flow.counters import SHARE_PER_RUNNING_SLOT, SHARE_SHARDS, Group
from sitedispatch.flow.placement import readings, room

SITE_LABELS_KEPT = 10_000  # sites a process remembers the dependency set of


class SiteLabels:
    """What a process believes each site's counter names as the dependency set its work waits by (flow/counters.py
    `dependency_label`), the most recently used kept: a submit on a site not seen yet (or whose set changed) is
    told by its transaction's refusal (LabelMoved, writing nothing) and submits again, so a warm process pays
    nothing for it and a cold one one refused transaction a site with dependencies."""

    def __init__(self, kept: int = SITE_LABELS_KEPT) -> None:
        self._kept = kept
        self._labels: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, site_id: str) -> str:
        with self._lock:
            label = self._labels.get(site_id)
            if label is not None:
                self._labels.move_to_end(site_id)
            return label or ""

    def learn(self, site_id: str, label: str) -> None:
        with self._lock:
            self._labels[site_id] = label
            self._labels.move_to_end(site_id)
            while len(self._labels) > self._kept:
                self._labels.popitem(last=False)


def share_named(settings: Settings, name: str) -> Group:
    """A share group from its name, with the deployment's maximum (a quota's, kept on its shards, wins)."""
    return Group(name, SHARE_PER_RUNNING_SLOT * settings.max_running_per_principal, SHARE_SHARDS)


def freed_by(settings: Settings, op: Operation) -> tuple[str, Slot] | None:
    """(share, the shard) whose place `op` held: what its end frees for the oldest waiting there."""
    if op.share is None:
        return None
    group = share_group_for(settings, op)
    k = group.index_of(op.share)
    return (group.name, group.slot(k)) if k is not None else None


def release(
    operations: OperationStore, queue: OperationQueue, clock: Clock, group: str, into: Slot, limit: int = 2
) -> int:
    """Send up to `limit` operations waiting for the share `group`, placed on `into` while it has room; how many
    were sent. A crash between the release and the send leaves an accepted, unsent operation: the reconciler's
    orphan sweep sends it."""
    released = operations.release_waiting(group, into, clock.now(), limit)
    for op in released:
        queue.send(message_for(op), op.dedup_id, lane_for(op.kind))
        operations.mark_queued(op.operation_id, clock.now())
    if released:
        obs.count(obs.Metric.OperationReleased, len(released))
    return len(released)


def hand_over(
    operations: OperationStore, queue: OperationQueue, clock: Clock, op: Operation, group: str, passing: Kind
) -> bool:
    """A start a rate of its kind holds hands its share place to the oldest of the set's work of another kind
    waiting for it (a site's order kept), which is sent with it: the rate's kind does not hold up the rest. Whether
    one was."""
    handed = operations.hand_over(op, group, clock.now(), passing)
    if handed is None:
        return False
    queue.send(message_for(handed), handed.dedup_id, lane_for(handed.kind))
    operations.mark_queued(handed.operation_id, clock.now())
    obs.count(obs.Metric.OperationReleased)
    return True


def refill(operations: OperationStore, queue: OperationQueue, clock: Clock, group: Group, limit: int) -> int:
    """Fill every shard of a share with room from what waits for it, up to `limit` in all (the reconciler)."""
    sent = 0
    for k, reading in enumerate(readings(operations, group)):
        free = min(room(group, k, reading), limit - sent)
        if free > 0:
            sent += release(operations, queue, clock, group.name, group.slot(k), free)
    return sent
