"""Dead operations queued again: by operation or by filter, idempotently, their DLQ messages removed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sitedispatch import observability as obs
from sitedispatch.domain.errors import Conflict, LimitReached, NotRunnable
from sitedispatch.domain.model import (
    Operation,
    Status,
    lane_for,
)
from sitedispatch.domain.ports import (
    DeadLetter,
)
from sitedispatch.flow.admission import (
    backpressure,
    limit_of,
    limits_for,
    message_for,
    share_group_for,
)
from sitedispatch.flow.counters import dependency_label
from sitedispatch.flow.placement import place
from sitedispatch.operator.access import Caller
from sitedispatch.operator.reads import DLQ_SCAN, DeadLetterFilter, Reads


@dataclass
class RedriveReport:
    dry_run: bool
    selected: list[str] = field(default_factory=list)
    redriven: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # operation -> why (already redriven: idempotent)
    refused: dict[str, str] = field(default_factory=dict)  # operation -> why (superseded, cancelled, limits)
    dlq_messages_removed: int = 0


class Redrives(Reads):
    def redrive(
        self,
        caller: Caller,
        *,
        operation_id: str | None = None,
        where: DeadLetterFilter | None = None,
        dry_run: bool = False,
        new_input: tuple[str, str] | None = None,
        reason: str = "",
        action: str = "redrive",
    ) -> RedriveReport:
        """Put dead operations back in their lane in a new attempt epoch and remove their DLQ messages.

        By operation, or every dead operation matching `where` (by site, by error code, or all). Idempotent: an
        operation already redriven is skipped (it is no longer dead at the epoch that was selected), so running
        the same redrive twice redrives once. Superseded or cancelled operations are refused with the reason."""
        report = RedriveReport(dry_run=dry_run)
        code = where.class_only if where is not None and operation_id is None else None
        if dry_run and code is not None and caller.sees_all:
            # a class's preview for whoever sees every principal: the class index's ids, no row read (the
            # redrive itself reads each row, and skips one revived since)
            report.selected = list(self.deps.operations.dead_ids_of_class(code, DLQ_SCAN))
            return report
        targets = self._targets(caller, operation_id, where, action, reason)
        if new_input is not None and len(targets) != 1:
            raise Conflict("--input-file replaces the input of one operation: name it with --operation")
        revived: dict[str, int] = {}
        for op in targets:
            report.selected.append(op.operation_id)
            why_not = _not_redrivable(op)
            if why_not is not None:
                (
                    report.skipped
                    if op.status in {Status.ACCEPTED, Status.QUEUED, Status.RUNNING, Status.SUCCEEDED}
                    else report.refused
                )[op.operation_id] = why_not
                if not dry_run:
                    outcome = "skipped" if op.operation_id in report.skipped else "refused"
                    self._audit(caller, action, op, reason, outcome, why=why_not)
                continue
            if dry_run:
                continue
            try:
                self._requeue(op, new_input)
            except LimitReached as full:
                limit = limit_of(limits_for(self.deps.settings, op), full.counter)
                why = str(backpressure(limit, full, self.deps.settings.default_operation_s))
                report.refused[op.operation_id] = why
                self._audit(caller, action, op, reason, "refused", why=why)
                continue
            except NotRunnable:  # another redrive (or a replay) revived it since it was read
                why = "already redriven (no longer dead at the selected epoch)"
                report.skipped[op.operation_id] = why
                self._audit(caller, action, op, reason, "skipped", why=why)
                continue
            revived[op.operation_id] = op.epoch
            report.redriven.append(op.operation_id)
            self._audit(
                caller,
                action,
                op,
                reason,
                "ok",
                epoch=op.epoch + 1,
                evidence=(op.evidence or {}).get("key"),
                input_replaced=new_input is not None,
            )
        if revived:
            report.dlq_messages_removed = self._remove_dead_letters(
                {lane_for(op.kind) for op in targets if op.operation_id in revived},
                lambda letter: revived.get(letter.attributes.get("operation_id", "")) == _epoch(letter),
            )
        obs.count(obs.Metric.OperationsRedriven, len(report.redriven))
        return report

    def _targets(
        self, caller: Caller, operation_id: str | None, where: DeadLetterFilter | None, action: str, reason: str
    ) -> list[Operation]:
        """The operation named (authorized for the action), or the dead ones matching `where`, oldest first: a
        site's work keeps its order."""
        if operation_id is not None:
            return [self._act(caller, action, operation_id, reason)]
        return sorted(
            self.dead_letters(caller, where or DeadLetterFilter(), limit=DLQ_SCAN), key=lambda op: op.created_at
        )

    def replay(
        self, caller: Caller, operation_id: str, new_input: tuple[str, str] | None = None, reason: str = ""
    ) -> RedriveReport:
        """A dead operation whose DLQ message is gone (expired, purged, or never sent because the worker died
        between the dead transition and the send): the same requeue as a redrive, by operation."""
        return self.redrive(caller, operation_id=operation_id, new_input=new_input, reason=reason, action="replay")

    def _requeue(self, op: Operation, new_input: tuple[str, str] | None) -> Operation:
        d = self.deps
        site = d.sites.get(op.site_id)  # its share is of the set of dependencies its site names now
        label = dependency_label(site.dependencies) if site is not None else ""
        revived = place(
            d.operations,
            op,
            limits_for(d.settings, op),
            share_group_for(d.settings, op, label),
            lambda slots, placement: d.operations.revive(op, d.clock.now(), slots, new_input, placement),
        )
        if revived.waiting_for:
            return revived  # its principal fills its share of the lane: sent as earlier work finishes
        # A crash here leaves an `accepted` row without a message: the reconciler's orphan sweep sends it.
        d.queue.send(message_for(revived), revived.dedup_id, lane_for(revived.kind))
        d.operations.mark_queued(revived.operation_id, d.clock.now())
        return revived

    def _remove_dead_letters(self, lanes: Iterable[str], remove: Callable[[DeadLetter], bool]) -> int:
        removed = 0
        for lane in sorted(lanes):
            gone, _ = self.deps.queue.sweep_dead_letters(lane, remove)
            removed += len(gone)
        return removed


def _epoch(letter: DeadLetter) -> int | None:
    try:
        return int(letter.attributes.get("epoch", ""))
    except ValueError:
        return None


def _not_redrivable(op: Operation) -> str | None:
    if op.status == Status.DEAD:
        return None
    if op.status == Status.SUPERSEDED:
        return (
            f"superseded by {op.superseded_by}: that operation does this one's work; a redrive would "
            "redo what was meant not to happen"
        )
    if op.status == Status.CANCELLED:
        return f"cancelled ({op.error.message if op.error else 'no reason'}): submit a new operation instead"
    if op.status == Status.SUCCEEDED:
        return "already succeeded" + (f" (after a redrive, epoch {op.epoch})" if op.epoch else "")
    return f"already redriven: {op.status.value} in epoch {op.epoch}"
