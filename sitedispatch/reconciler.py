"""The reconciler: repairs that a schedule runs. Cron only coordinates (G8): it re-sends, it never does the work.

This release repairs orphans (an operation accepted but never sent, e.g. the submitter crashed between the row and
the send). Stale leases, lost fan-ins, pointer and counter repair arrive with the operator/reconciler issue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import observability as obs
from .model import QueueMessage, Status, lane_for
from .ports import Clock, OperationQueue, OperationStore

ORPHAN_GRACE_S = 30.0


@dataclass
class Sweep:
    schedule: str
    repaired: dict[str, int] = field(default_factory=dict)


class Reconciler:
    def __init__(self, operations: OperationStore, queue: OperationQueue, clock: Clock,
                 orphan_grace_s: float = ORPHAN_GRACE_S) -> None:
        self.operations = operations
        self.queue = queue
        self.clock = clock
        self.orphan_grace_s = orphan_grace_s

    def schedules(self) -> dict[str, Callable[[], Sweep]]:
        """Schedule name -> sweep. An unknown name is logged and skipped by the caller."""
        return {"reconcile": self.reconcile}

    def run(self, schedule: str) -> Sweep | None:
        sweep = self.schedules().get(schedule)
        if sweep is None:
            obs.logger.warning("unknown schedule skipped", extra={"schedule": schedule})
            return None
        return sweep()

    def reconcile(self) -> Sweep:
        sweep = Sweep("reconcile")
        cutoff = self.clock.now() - self.orphan_grace_s
        orphans = 0
        for op in self.operations.list(status=Status.ACCEPTED, limit=1000):
            if op.created_at > cutoff:
                continue
            # Re-sending is always safe: the worker skips anything already done, and dedup ids match the epoch.
            self.queue.send(QueueMessage(op.operation_id, op.site_id), op.dedup_id, lane_for(op.kind))
            self.operations.mark_queued(op.operation_id, self.clock.now())
            orphans += 1
        sweep.repaired["orphans_resent"] = orphans
        obs.count("OrphansResent", orphans)
        obs.logger.info("reconcile sweep", extra={"repaired": sweep.repaired})
        return sweep
