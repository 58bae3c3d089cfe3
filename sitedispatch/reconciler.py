"""The reconciler: repairs that a schedule runs. Cron only coordinates (G8): it re-sends, it never does the work.

`reconcile` repairs orphans (an operation accepted but never sent, e.g. the submitter crashed between the row and
the send) and drifted admission counters (by recount).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import observability as obs
from .admission import is_admission_counter, recount
from .model import RUNNABLE, QueueMessage, Status, lane_for
from .ports import Clock, OperationQueue, OperationStore

ORPHAN_GRACE_S = 30.0
COUNTER_QUIET_S = 120.0  # a counter is repaired only after this long without a change (index lag is far below)
RECOUNT_LIMIT = 100_000


@dataclass
class Sweep:
    schedule: str
    repaired: dict[str, int] = field(default_factory=dict)


class Reconciler:
    def __init__(self, operations: OperationStore, queue: OperationQueue, clock: Clock,
                 orphan_grace_s: float = ORPHAN_GRACE_S, counter_quiet_s: float = COUNTER_QUIET_S) -> None:
        self.operations = operations
        self.queue = queue
        self.clock = clock
        self.orphan_grace_s = orphan_grace_s
        self.counter_quiet_s = counter_quiet_s

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
        sweep.repaired["counters_repaired"] = self.repair_counters()
        obs.logger.info("reconcile sweep", extra={"repaired": sweep.repaired})
        return sweep

    def repair_counters(self) -> int:
        """Counters are exact by construction (moved in the transactions that move operations); this recount is the
        tool for drift from a bug or a hand edit. A counter is set to the recount only if it has been quiet for
        `counter_quiet_s` and still holds what was read, so a recount racing live traffic changes nothing."""
        started = self.clock.now()
        observed = {k: v for k, v in self.operations.counters().items() if is_admission_counter(k)}
        outstanding = [op for status in RUNNABLE for op in self.operations.list(status=status, limit=RECOUNT_LIMIT)]
        expected = recount(outstanding)
        repaired = 0
        for counter in sorted(observed.keys() | expected.keys()):
            have, want = observed.get(counter, 0), expected.get(counter, 0)
            if have != want and self.operations.repair_counter(counter, have, want,
                                                               started - self.counter_quiet_s, self.clock.now()):
                obs.logger.warning("counter repaired", extra={"counter": counter, "was": have, "now": want})
                repaired += 1
        obs.count("CountersRepaired", repaired)
        return repaired
