"""An attempt's transitions on the operations table: claim and start (with the site's lease), retry, dead, end,
revive, checkpoint and cancel, each one conditional write or transaction, a failed condition a typed domain error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from pynamodb.expressions.update import Action

from sitedispatch.aws.events import EventOutbox
from sitedispatch.aws.flow import FlowCounters
from sitedispatch.aws.operation_rows import (
    LEASE,
    ROW,
    RUNNABLE_VALUES,
    error_dict,
    placement_of,
    read_operation,
    same_or_absent,
    share_refusals,
    to_operation,
)
from sitedispatch.aws.sites import claim_lease_update
from sitedispatch.aws.tables import CounterItem, OperationItem, SiteItem, dead_class_key
from sitedispatch.aws.writes import (
    NamedTransaction,
    TransactionFailed,
    conditionally,
    transaction,
    under_limit,
)
from sitedispatch.domain.dependencies import DependencyRefused, DependencyTake, RateTake
from sitedispatch.domain.errors import NotRunnable, StaleFence
from sitedispatch.domain.events import Event, operation_ended
from sitedispatch.domain.model import ErrorInfo, Lease, Operation, Site, Status, error_class
from sitedispatch.domain.ports import Placement, Slot
from sitedispatch.flow.admission import held_by


class AttemptTransitions:
    M: type[OperationItem]
    S: type[SiteItem]
    C: type[CounterItem]
    flow: FlowCounters
    outbox: EventOutbox

    def _attempt(self, fence: int, now: float, keeping: str | None = None) -> tuple[list[Action], Any]:
        """Spending an attempt under `fence`: its updates and the row's condition. `keeping`: the running slot the
        row was read holding, which the attempt keeps: the row must still hold it (a recovery in between gave it
        back, with its dependencies' places, and an attempt without them must not run)."""
        M = self.M
        actions: list[Action] = [
            M.status.set(Status.RUNNING.value),
            M.attempt.add(1),
            M.fence.set(fence),
            M.started_at.set(now),
            M.updated_at.set(now),
            M.not_before.remove(),
            M.continuing.remove(),  # an attempt is never itself a continuation's to take
        ]
        # An attempt under an older fence never overwrites one under a newer fence (two deliveries at once).
        runnable = (
            M.status.is_in(*RUNNABLE_VALUES)
            & (M.attempt < M.attempt_budget)
            & (M.fence.does_not_exist() | (M.fence < fence))
        )
        if keeping:
            runnable &= M.running_slot == keeping
        return actions, runnable

    def _continuation(self, recorded_fence: int, fence: int, now: float) -> tuple[list[Action], Any]:
        """Continuing the attempt that recorded a continuation under `recorded_fence`, now under `fence`: its
        updates and the row's condition (once: the flag goes with it, and a stale copy's fence no longer matches)."""
        M = self.M
        actions: list[Action] = [M.fence.set(fence), M.updated_at.set(now), M.continuing.remove()]
        condition = (M.status == Status.RUNNING.value) & (M.continuing == True) & (M.fence == recorded_fence)  # noqa: E712
        return actions, condition

    def claim_and_start(
        self,
        op: Operation,
        site: Site,
        now: float,
        lease_s: float,
        slot: Slot | None = None,
        dependency: DependencyTake | None = None,
    ) -> tuple[Lease, Operation] | None:
        M, S = self.M, self.S
        take = dependency or DependencyTake()
        fence = site.fence + 1
        if op.continues and op.fence is not None:
            actions, runnable = self._continuation(op.fence, fence, now)
            slot = None  # the attempt keeps the slot it holds
            take = DependencyTake()  # and what it holds of its dependencies
        else:
            actions, runnable = self._attempt(fence, now)
        try:
            with transaction(M) as tx:
                lease_actions, lease_condition = claim_lease_update(S, site, op.operation_id, now, lease_s)
                tx.update(LEASE, S(site.site_id), lease_actions, condition=lease_condition)
                if slot is None:  # the row takes no slot; one it held when read, it must still hold
                    kept = (M.running_slot == op.running_slot) if op.running_slot else M.running_slot.does_not_exist()
                    cleared = [*actions, M.rate_reserved.remove()] if not op.continues else actions
                    tx.update(ROW, M(op.operation_id), cleared, condition=runnable & kept)
                    self._take_dependencies(tx, take.keeping_slots(), op.operation_id, now)
                else:
                    self._start_taking_slot(tx, op.operation_id, actions, runnable, slot, now, take)
        except TransactionFailed as failed:
            refused = self._dependency_refusal(failed, take)
            if refused is not None:
                raise refused from failed.cause
            if slot is not None and failed.failed == {"slot"}:
                raise self.flow.limit_reached(slot.counter, slot.maximum) from failed.cause
            return None
        if op.continues:
            started = op.continued(fence, now)
        elif slot is not None:
            started = op.attempt_started(fence, now, slot.counter, tuple(s.counter for s in take.slots))
        else:
            started = op.attempt_started(fence, now, op.running_slot)
        return Lease(site.site_id, op.operation_id, fence, now + lease_s), started

    def _start_taking_slot(
        self,
        tx: NamedTransaction,
        operation_id: str,
        actions: list[Action],
        runnable: Any,
        slot: Slot,
        now: float,
        take: DependencyTake | None = None,
    ) -> None:
        """The attempt's row, taking one of the running `slot` (the row holds none yet; the slot is under its
        maximum) and what it takes of its dependencies."""
        M, C = self.M, self.flow.C
        take = take or DependencyTake()
        held = [M.dependency_slots.set(cast(Any, [s.counter for s in take.slots]))] if take.slots else []
        tx.update(
            ROW,
            M(operation_id),
            [*actions, M.running_slot.set(slot.counter), *held, M.rate_reserved.remove()],
            condition=runnable & M.running_slot.does_not_exist(),
        )
        tx.update(
            "slot", C(slot.counter), self.flow.moved_up(slot.counter, now), condition=under_limit(C, slot.maximum)
        )
        self._take_dependencies(tx, take, operation_id, now)

    def _take_dependencies(self, tx: NamedTransaction, take: DependencyTake, operation_id: str, now: float) -> None:
        """A place on each capped running shard (under its part, the breaker's flag open for this operation), the
        flag checked on each gate, each rate bucket moved on from what was read."""
        C = self.flow.C
        open_for = C.blocked.does_not_exist() | (C.probe == operation_id)
        for i, dep_slot in enumerate(take.slots):
            tx.update(
                f"dep-slot:{i}",
                C(dep_slot.counter),
                self.flow.moved_up(dep_slot.counter, now),
                condition=under_limit(C, dep_slot.maximum) & open_for,
            )
        for i, gate in enumerate(take.gates):
            tx.check(f"dep-gate:{i}", C, gate, open_for)
        for i, rate in enumerate(take.rates):
            tx.update(f"dep-rate:{i}", C(rate.counter), [C.tat.set(rate.after)], condition=_bucket_as_read(C, rate))

    def _dependency_refusal(self, failed: TransactionFailed, take: DependencyTake) -> Exception | None:
        """What a failed condition on a dependency's item means: a capped shard refused (full, or its breaker
        set: the caller reads the shards and tries another, or waits), a gate or a bucket that moved."""
        for i, dep_slot in enumerate(take.slots):
            if f"dep-slot:{i}" in failed.failed:
                return self.flow.limit_reached(dep_slot.counter, dep_slot.maximum)
        for i, gate in enumerate(take.gates):
            if f"dep-gate:{i}" in failed.failed:
                return DependencyRefused(gate)
        for i, rate in enumerate(take.rates):
            if f"dep-rate:{i}" in failed.failed:
                return DependencyRefused(rate.counter)
        return None

    def reserve_rates(self, op: Operation, rates: Sequence[RateTake], at: float, now: float) -> bool:
        M, C = self.M, self.flow.C
        reserved = {**op.rate_reserved, **{rate.counter: at for rate in rates}}
        try:
            with transaction(M) as tx:
                tx.update(
                    ROW,
                    M(op.operation_id),
                    [M.not_before.set(at), M.rate_reserved.set(reserved), M.updated_at.set(now)],
                    condition=M.status.is_in(*RUNNABLE_VALUES) & (M.epoch == op.epoch) & (M.attempt == op.attempt),
                )
                for i, rate in enumerate(rates):
                    tx.update(
                        f"dep-rate:{i}", C(rate.counter), [C.tat.set(rate.after)], condition=_bucket_as_read(C, rate)
                    )
        except TransactionFailed:
            return False
        return True

    def start_attempt(
        self,
        operation_id: str,
        fence: int,
        now: float,
        slot: Slot | None = None,
        current: Operation | None = None,
        continues_from: int | None = None,
        dependency: DependencyTake | None = None,
    ) -> Operation:
        M = self.M
        take = dependency or DependencyTake()
        spent: list[Action] = []  # a start's rate reservations are spent with it
        if continues_from is not None:
            actions, runnable = self._continuation(continues_from, fence, now)
            slot = None
            take = DependencyTake()
        else:
            keeping = current.running_slot if slot is None and current is not None else None
            actions, runnable = self._attempt(fence, now, keeping)
            spent = [M.rate_reserved.remove()]
        if slot is not None:
            try:
                with transaction(M) as tx:
                    self._start_taking_slot(tx, operation_id, actions, runnable, slot, now, take)
            except TransactionFailed as failed:
                refused = self._dependency_refusal(failed, take)
                if refused is not None and ROW not in failed.failed:
                    raise refused from failed.cause
                if ROW not in failed.failed:
                    raise failed.mapped(
                        [("slot", lambda: self.flow.limit_reached(slot.counter, slot.maximum))]
                    ) from failed.cause
                # Not runnable, or the row already holds a slot (an earlier attempt died): keep that slot.
                runnable &= M.running_slot.exists()
            else:
                if current is not None:  # the row as it was, plus what this transaction set: no extra read
                    return current.attempt_started(fence, now, slot.counter, tuple(s.counter for s in take.slots))
                op = read_operation(self.M, operation_id)
                assert op is not None
                return op
        kept = take.keeping_slots()
        if not kept.empty:  # an attempt that died holding its slots: the breaker's gates and the rates still apply
            return self._start_keeping_slots(operation_id, actions, runnable, kept, now)
        item = M(operation_id)
        if not conditionally(lambda: item.update(actions=[*actions, *spent], condition=runnable)):
            raise NotRunnable(operation_id)
        return to_operation(item)

    def _start_keeping_slots(
        self, operation_id: str, actions: list[Action], runnable: Any, kept: DependencyTake, now: float
    ) -> Operation:
        M = self.M
        try:
            with transaction(M) as tx:
                tx.update(ROW, M(operation_id), [*actions, M.rate_reserved.remove()], condition=runnable)
                self._take_dependencies(tx, kept, operation_id, now)
        except TransactionFailed as failed:
            refused = self._dependency_refusal(failed, kept)
            if refused is not None and ROW not in failed.failed:
                raise refused from failed.cause
            raise failed.mapped([(ROW, lambda: NotRunnable(operation_id))]) from failed.cause
        op = read_operation(M, operation_id)
        assert op is not None
        return op

    def schedule_retry(self, op: Operation, fence: int, error: ErrorInfo, not_before: float, now: float) -> None:
        M = self.M
        actions: list[Action] = [
            M.status.set(Status.QUEUED.value),
            M.error.set(error_dict(error)),
            M.not_before.set(not_before),
            M.updated_at.set(now),
        ]
        slot = op.running_slot
        condition = (M.status == Status.RUNNING.value) & (M.fence == fence) & same_or_absent(M.running_slot, slot)
        if slot is None:
            if not conditionally(lambda: M(op.operation_id).update(actions=actions, condition=condition)):
                raise StaleFence(op.operation_id)
            return
        try:
            with transaction(M) as tx:
                tx.update(
                    ROW,
                    M(op.operation_id),
                    [*actions, M.running_slot.remove(), M.dependency_slots.remove()],
                    condition=condition,
                )
                self.flow.release(tx, (slot, *op.dependency_slots), None, now)
        except TransactionFailed as failed:
            raise failed.mapped([(ROW, lambda: StaleFence(op.operation_id))]) from failed.cause

    def mark_dead(
        self,
        op: Operation,
        fence: int | None,
        error: ErrorInfo,
        now: float,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        M = self.M
        condition = M.status.is_in(*RUNNABLE_VALUES)
        if fence is not None:
            condition &= M.fence == fence
        actions = [M.status.set(Status.DEAD.value), M.error.set(error_dict(error))]
        if evidence is not None:
            actions.append(M.evidence.set(evidence))
        code = error_class(error, evidence)
        if code:
            actions.append(M.dead_class.set(dead_class_key(code)))
        key = (evidence or {}).get("key")
        event = operation_ended(op, Status.DEAD, now, error=error, evidence_key=key if isinstance(key, str) else None)
        self._end(op, actions, condition, now, event)

    def end(
        self,
        op: Operation,
        status: Status,
        now: float,
        *,
        from_statuses: Sequence[Status],
        reason: str = "",
        superseded_by: str | None = None,
    ) -> None:
        """-> cancelled or superseded, from one of `from_statuses` only, releasing what the operation holds."""
        M = self.M
        actions = [
            M.status.set(status.value),
            M.error.set({"error_class": status.value, "code": status.value, "message": reason, "retryable": False}),
        ]
        if superseded_by:
            actions.append(M.superseded_by.set(superseded_by))
        condition = M.status.is_in(*(s.value for s in from_statuses))
        self._end(op, actions, condition, now, operation_ended(op, status, now, superseded_by=superseded_by))

    def _end(self, op: Operation, actions: list[Any], condition: Any, now: float, event: Event) -> None:
        """The terminal transition, the release of everything the row holds and its event, in one transaction, while
        the row holds exactly what `op` read: its epoch (what `holds` was written for), share place, wait and
        slot."""
        M = self.M
        actions = [
            *actions,
            M.finished_at.set(now),
            M.updated_at.set(now),
            M.holds.remove(),
            M.share.remove(),
            M.running_slot.remove(),
            M.dependency_slots.remove(),
            M.rate_reserved.remove(),
            M.waiting_for.remove(),
            M.waiting_at.remove(),
        ]
        condition &= (
            (M.epoch == op.epoch)
            & same_or_absent(M.share, op.share)
            & same_or_absent(M.running_slot, op.running_slot)
            & same_or_absent(M.waiting_at, op.waiting_at)
        )
        try:
            with transaction(M) as tx:
                tx.update(ROW, M(op.operation_id), actions, condition=condition)
                self.flow.release(tx, held_by(op), op.waiting_at, now)
                self.outbox.add(tx, event)
        except TransactionFailed as failed:
            raise failed.mapped([(ROW, lambda: NotRunnable(op.operation_id))]) from failed.cause

    def revive(
        self,
        op: Operation,
        now: float,
        limits: Sequence[Slot],
        new_input: tuple[str, str] | None = None,
        share: Placement | None = None,
    ) -> Operation:
        M = self.M
        placed = placement_of(share)
        holds = tuple(slot.counter for slot in limits)
        actions = [
            M.status.set(Status.ACCEPTED.value),
            M.epoch.set(op.epoch + 1),
            M.attempt.set(0),
            M.updated_at.set(now),
            M.error.remove(),
            M.evidence.remove(),
            M.dead_class.remove(),
            M.finished_at.remove(),
            M.not_before.remove(),
            M.queued_at.remove(),
            M.started_at.remove(),
            M.holds.set(cast(Any, list(holds))),
        ]
        for attribute, value in (
            (M.share, placed.share),
            (M.waiting_for, placed.waiting_for),
            (M.waiting_at, placed.waiting_at),
        ):
            actions.append(attribute.remove() if value is None else attribute.set(value))
        if new_input is not None:
            actions += [M.input_key.set(new_input[0]), M.input_digest.set(new_input[1]), M.inline_input.remove()]
        try:
            with transaction(M) as tx:
                dead = (M.status == Status.DEAD.value) & (M.epoch == op.epoch)
                tx.update(ROW, M(op.operation_id), actions, condition=dead)
                self.flow.admit(tx, limits, now, None, op.principal)
                if share is not None:
                    self.flow.place(tx, share, now)
        except TransactionFailed as failed:
            errors = [(ROW, lambda: NotRunnable(op.operation_id)), *share_refusals(share)]
            raise failed.mapped([*errors, *self.flow.refusals(limits, None, op.principal)]) from failed.cause
        revived = read_operation(self.M, op.operation_id)
        assert revived is not None
        return revived

    def save_checkpoint(
        self, operation_id: str, fence: int, checkpoint: dict[str, Any], now: float, continues: bool = False
    ) -> None:
        M = self.M
        ours = (M.status == Status.RUNNING.value) & (M.fence == fence)
        actions: list[Action] = [M.checkpoint.set(checkpoint), M.updated_at.set(now)]
        if continues:
            actions.append(M.continuing.set(True))
        if not conditionally(lambda: M(operation_id).update(actions=actions, condition=ours)):
            raise StaleFence(f"operation {operation_id}: fence {fence} is no longer its attempt's")

    def request_cancel(self, operation_id: str, reason: str, now: float) -> None:
        """Mark a running operation so that its commit is refused (the commit checks this attribute)."""
        M = self.M
        if not conditionally(
            lambda: M(operation_id).update(
                actions=[M.cancel_requested.set(reason or "cancelled"), M.updated_at.set(now)],
                condition=M.status.is_in(*RUNNABLE_VALUES),
            )
        ):
            raise NotRunnable(operation_id)


def _bucket_as_read(C: Any, rate: RateTake) -> Any:
    """The rate bucket still holds the arrival time read (never written: absent)."""
    return C.tat.does_not_exist() if rate.read is None else C.tat == rate.read
