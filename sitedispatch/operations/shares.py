"""A principal's share of a lane's queue: what waits for it is sent, oldest first, as earlier work finishes.

Why: the per-principal running cap alone keeps a principal from occupying every execution environment, but not
from filling the FIFO queue. A flood of one principal's messages sits ahead of everyone else's, and each of them is
received and deferred (over its cap) before a newcomer's message is reached: a newcomer waited one pass over the
flood. With a share, at most SHARE_PER_RUNNING_SLOT x its running cap of a principal's operations are in a lane's
queue at once; the rest are accepted and wait in the operations table (the sparse by-waiting index), so what another
principal's message finds ahead of it is bounded by the number of principals, not by the size of anyone's backlog.

Who releases: whoever ends an operation that held a place, when its delivery read showed others waiting (the worker:
no extra read, the share counter comes in the same BatchGetItem as the operation), an operator's cancel, and the
reconciler's sweep (for a release a race left undone: a finish whose read saw no one waiting yet).
"""

from __future__ import annotations

from sitedispatch import observability as obs
from sitedispatch.domain.model import QueueMessage, lane_for
from sitedispatch.domain.ports import Clock, OperationQueue, OperationStore, Slot
from sitedispatch.domain.settings import Settings
from sitedispatch.operations.admission import SHARE_PER_RUNNING_SLOT


def share_of(settings: Settings, counter_id: str) -> Slot:
    """The share a counter stands for, with the deployment's maximum (a quota's, kept on the counter, wins)."""
    return Slot(counter_id, SHARE_PER_RUNNING_SLOT * settings.max_running_per_principal)


def release(operations: OperationStore, queue: OperationQueue, clock: Clock, share: Slot, limit: int = 2) -> int:
    """Send up to `limit` operations waiting for `share` while it has room; how many were sent. A crash between
    the release and the send leaves an accepted, unsent operation: the reconciler's orphan sweep sends it."""
    released = operations.release_waiting(share, clock.now(), limit)
    for op in released:
        queue.send(QueueMessage.of(op), op.dedup_id, lane_for(op.kind))
        operations.mark_queued(op.operation_id, clock.now())
    if released:
        obs.count("OperationReleased", len(released))
    return len(released)
