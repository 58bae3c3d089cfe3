"""The operations table (and the flow counters its transitions move, through aws/flow.py): DynamoDB's
OperationStore.

Every guard is a condition expression evaluated by DynamoDB; a failed one is mapped to a typed domain error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple, cast

from pynamodb.expressions.update import Action

from sitedispatch.aws.flow import GUARD, SHARE, FlowCounters
from sitedispatch.aws.sites import claim_lease_update, new_site, to_site
from sitedispatch.aws.tables import UNSENT, Models, OperationItem, index_shard, index_shards
from sitedispatch.aws.writes import (
    NamedTransaction,
    TransactionFailed,
    conditionally,
    get_item,
    get_items,
    read_all,
    transaction,
    under_limit,
)
from sitedispatch.domain.errors import AlreadyExists, NotRunnable, ShareMoved, SiteRegistered, StaleFence
from sitedispatch.domain.model import RUNNABLE, ErrorInfo, Kind, Lease, Operation, Site, Status
from sitedispatch.domain.ports import CounterReading, Delivery, Move, Placement, SiteOwner, Slot, UnsentGroup
from sitedispatch.flow.admission import held_by

RUNNABLE_VALUES = tuple(s.value for s in RUNNABLE)
ROW = "operation"  # the operation row's name in a transaction (counters are named `counter:ID`)
LEASE = "lease"  # the site's lease, claimed in the transaction that starts the attempt
SITE = "site"  # the site's registration, in the transaction of its first submit


def unsent_record(group: str) -> str:
    """The counters table's record of a batch group not yet known sent (create_group, sent, unsent)."""
    return f"{UNSENT}#{group}"


def _error_dict(error: ErrorInfo) -> dict[str, Any]:
    return {
        "error_class": error.error_class,
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable,
    }


def to_operation(item: OperationItem) -> Operation:
    error = item.error
    return Operation(
        operation_id=item.operation_id,
        site_id=item.site_id,
        principal=item.principal,
        kind=Kind(item.kind),
        status=Status(item.status),
        input_key=item.input_key,
        input_digest=item.input_digest,
        idempotency_key=item.idempotency_key,
        created_at=float(item.created_at),
        updated_at=float(item.updated_at),
        attempt=int(item.attempt or 0),
        attempt_budget=int(item.attempt_budget or 0),
        epoch=int(item.epoch or 0),
        fence=None if item.fence is None else int(item.fence),
        queued_at=item.queued_at,
        started_at=item.started_at,
        finished_at=item.finished_at,
        not_before=item.not_before,
        error=ErrorInfo(error["error_class"], error["code"], error["message"], error["retryable"]) if error else None,
        result=item.result or {},
        cancel_requested=item.cancel_requested,
        superseded_by=item.superseded_by,
        running_slot=item.running_slot,
        evidence=item.evidence,
        inline_input=item.inline_input,
        waiting_for=item.waiting_for,
        waiting_at=item.waiting_at,
        checkpoint=item.checkpoint,
        continuing=bool(item.continuing),
        tenant=item.tenant or "",
        holds=tuple(cast(list[str], item.holds or [])),
        share=item.share,
    )


class DynamoOperationStore:
    def __init__(self, models: Models) -> None:
        self.M = models.Operation
        self.S = models.Site
        self.C = models.Counter
        self.flow = FlowCounters(models)

    def create(
        self,
        op: Operation,
        limits: Sequence[Slot] = (),
        owner: SiteOwner | None = None,
        share: Placement | None = None,
    ) -> Operation:
        M = self.M
        placed = _placed(share)
        written = replace(
            op,
            holds=tuple(slot.counter for slot in limits),
            share=placed.share,
            waiting_for=placed.waiting_for,
            waiting_at=placed.waiting_at,
        )
        item = self._item(written)
        try:
            with transaction(M) as tx:
                tx.save(ROW, item, condition=M.operation_id.does_not_exist())
                self.flow.admit(tx, limits, op.created_at, owner, op.principal)
                if share is not None:
                    self.flow.place(tx, share, op.created_at)
                if owner is not None and owner.register:
                    site = new_site(self.S, op.site_id, op.principal, op.created_at)
                    tx.save(SITE, site, condition=self.S.site_id.does_not_exist())
        except TransactionFailed as failed:
            errors = [
                (ROW, lambda: AlreadyExists(op.operation_id)),
                (SITE, lambda: SiteRegistered(op.site_id)),
                *self._share_refusals(share),
            ]
            raise failed.mapped([*errors, *self.flow.refusals(limits, owner, op.principal)]) from failed.cause
        return written

    def create_group(self, ops: Sequence[Operation], moves: Sequence[Move]) -> bool:
        M, C = self.M, self.C
        if not ops or any(move.count > move.maximum for move in moves):
            return False
        principal, now, group = ops[0].principal, ops[0].created_at, ops[0].operation_id
        unsent = C(
            unsent_record(group),
            operations=cast(Any, [op.operation_id for op in ops]),
            changed_at=now,
            held=index_shard(UNSENT, group),
        )
        try:
            with transaction(M) as tx:
                for op in ops:
                    tx.save(f"{ROW}:{op.operation_id}", self._item(op), condition=M.operation_id.does_not_exist())
                tx.save(UNSENT, unsent, condition=C.counter_id.does_not_exist())
                for move in moves:
                    self.flow.move(tx, move, principal, now)
                    if move.register:
                        site = new_site(self.S, move.register, principal, now)
                        tx.save(f"{SITE}:{move.register}", site, condition=self.S.site_id.does_not_exist())
        except TransactionFailed:
            return False
        return True

    def sent(self, groups: Sequence[str]) -> None:
        with self.C.batch_write() as batch:
            for group in groups:
                batch.delete(self.C(unsent_record(group)))

    def unsent(self, created_before: float) -> list[UnsentGroup]:
        C = self.C
        ids = [item.counter_id for shard in index_shards(UNSENT) for item in C.by_held.query(shard)]
        return sorted(
            (
                UnsentGroup(
                    r.counter_id.removeprefix(f"{UNSENT}#"),
                    tuple(cast(list[str], r.operations or [])),
                    float(r.changed_at),
                )
                for r in read_all(C, ids)
                if r.changed_at is not None and r.changed_at < created_before
            ),
            key=lambda group: group.created_at,
        )

    @staticmethod
    def _share_refusals(share: Placement | None) -> list[tuple[str, Any]]:
        if share is None:
            return []
        return [(name, lambda: ShareMoved(share.slot.counter)) for name in (SHARE, GUARD)]

    def _item(self, op: Operation) -> OperationItem:
        """A new operation's row."""
        return self.M(
            op.operation_id,
            site_id=op.site_id,
            principal=op.principal,
            tenant=op.tenant or None,
            kind=op.kind.value,
            status=op.status.value,
            input_key=op.input_key,
            input_digest=op.input_digest,
            idempotency_key=op.idempotency_key,
            created_at=op.created_at,
            updated_at=op.updated_at,
            attempt=op.attempt,
            attempt_budget=op.attempt_budget,
            epoch=op.epoch,
            inline_input=op.inline_input,
            holds=cast(Any, list(op.holds)) if op.holds else None,
            share=op.share,
            waiting_for=op.waiting_for,
            waiting_at=op.waiting_at,
        )

    def release_waiting(self, group: str, into: Slot, now: float, limit: int = 1) -> list[Operation]:
        M = self.M
        released: list[Operation] = []
        for item in M.by_waiting.query(group, scan_index_forward=True, limit=limit + 2):
            if len(released) >= limit:
                break
            op = to_operation(item)
            try:
                with transaction(M) as tx:
                    tx.update(
                        ROW,
                        M(op.operation_id),
                        [
                            M.waiting_for.remove(),
                            M.waiting_at.remove(),
                            M.share.set(into.counter),
                            M.updated_at.set(now),
                        ],
                        condition=(M.waiting_for == group)
                        & _same(M.waiting_at, op.waiting_at)
                        & M.status.is_in(*RUNNABLE_VALUES),
                    )
                    self.flow.take_released(tx, into, op.waiting_at, now)
            except TransactionFailed as failed:
                if SHARE in failed.failed:
                    break  # no room: the next finish releases
                continue  # released by another, or ended, since the index showed it
            released.append(replace(op, waiting_for=None, waiting_at=None, share=into.counter, updated_at=now))
        return released

    def counter(self, counter_id: str) -> int:
        return self.flow.counter(counter_id)

    def counters(self, prefix: str = "") -> dict[str, int]:
        return self.flow.scan(prefix)

    def read_counters(self, counter_ids: Sequence[str]) -> dict[str, CounterReading]:
        return self.flow.read(counter_ids)

    def held_counters(self) -> dict[str, int]:
        return self.flow.held()

    def repair_counter(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        return self.flow.repair(counter_id, observed, value, quiet_since, now)

    def forget_counter(self, counter_id: str, quiet_since: float) -> bool:
        return self.flow.forget(counter_id, quiet_since)

    def get(self, operation_id: str) -> Operation | None:
        item = get_item(self.M, operation_id)
        return None if item is None else to_operation(item)

    def read_delivery(self, operation_id: str, site_id: str, shares: Sequence[str] = ()) -> Delivery:
        wanted: list[tuple[Any, ...]] = [(self.M, operation_id), (self.S, site_id)]
        wanted += [(self.flow.C, share) for share in shares]
        op_item, site_item, *counters = get_items(*wanted)
        waiting = sum(int(cast(Any, item).waiting or 0) for item in counters if item is not None)
        return Delivery(
            None if op_item is None else to_operation(op_item),  # type: ignore[arg-type]
            None if site_item is None else to_site(site_item),  # type: ignore[arg-type]
            waiting,
        )

    def mark_queued(self, operation_id: str, now: float) -> bool:
        M = self.M
        if conditionally(
            lambda: M(operation_id).update(
                actions=[M.status.set(Status.QUEUED.value), M.queued_at.set(now), M.updated_at.set(now)],
                condition=M.status == Status.ACCEPTED.value,
            )
        ):
            return True
        conditionally(  # a fast worker moved it on first: the send time is kept all the same
            lambda: M(operation_id).update(
                actions=[M.queued_at.set(now)], condition=M.operation_id.exists() & M.queued_at.does_not_exist()
            )
        )
        return False

    def _attempt(self, fence: int, now: float) -> tuple[list[Action], Any]:
        """Spending an attempt under `fence`: its updates and the row's condition."""
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
        return actions, runnable

    def _continuation(self, recorded_fence: int, fence: int, now: float) -> tuple[list[Action], Any]:
        """Continuing the attempt that recorded a continuation under `recorded_fence`, now under `fence`: its
        updates and the row's condition (once: the flag goes with it, and a stale copy's fence no longer matches)."""
        M = self.M
        actions: list[Action] = [M.fence.set(fence), M.updated_at.set(now), M.continuing.remove()]
        condition = (M.status == Status.RUNNING.value) & (M.continuing == True) & (M.fence == recorded_fence)  # noqa: E712
        return actions, condition

    def claim_and_start(
        self, op: Operation, site: Site, now: float, lease_s: float, slot: Slot | None = None
    ) -> tuple[Lease, Operation] | None:
        M, S = self.M, self.S
        fence = site.fence + 1
        if op.continues and op.fence is not None:
            actions, runnable = self._continuation(op.fence, fence, now)
            slot = None  # the attempt keeps the slot it holds
        else:
            actions, runnable = self._attempt(fence, now)
        try:
            with transaction(M) as tx:
                lease_actions, lease_condition = claim_lease_update(S, site, op.operation_id, now, lease_s)
                tx.update(LEASE, S(site.site_id), lease_actions, condition=lease_condition)
                if slot is None:  # the row takes no slot; one it held when read, it must still hold
                    kept = (M.running_slot == op.running_slot) if op.running_slot else M.running_slot.does_not_exist()
                    tx.update(ROW, M(op.operation_id), actions, condition=runnable & kept)
                else:
                    self._start_taking_slot(tx, op.operation_id, actions, runnable, slot, now)
        except TransactionFailed as failed:
            if slot is not None and failed.failed == {"slot"}:
                raise self.flow.limit_reached(slot.counter, slot.maximum) from failed.cause
            return None
        if op.continues:
            started = op.continued(fence, now)
        else:
            started = op.attempt_started(fence, now, slot.counter if slot is not None else op.running_slot)
        return Lease(site.site_id, op.operation_id, fence, now + lease_s), started

    def _start_taking_slot(
        self, tx: NamedTransaction, operation_id: str, actions: list[Action], runnable: Any, slot: Slot, now: float
    ) -> None:
        """The attempt's row, taking one of the running `slot` (the row holds none yet; the slot is under its
        maximum)."""
        M, C = self.M, self.flow.C
        tx.update(
            ROW,
            M(operation_id),
            [*actions, M.running_slot.set(slot.counter)],
            condition=runnable & M.running_slot.does_not_exist(),
        )
        tx.update(
            "slot", C(slot.counter), self.flow.moved_up(slot.counter, now), condition=under_limit(C, slot.maximum)
        )

    def start_attempt(
        self,
        operation_id: str,
        fence: int,
        now: float,
        slot: Slot | None = None,
        current: Operation | None = None,
        continues_from: int | None = None,
    ) -> Operation:
        M = self.M
        if continues_from is not None:
            actions, runnable = self._continuation(continues_from, fence, now)
            slot = None
        else:
            actions, runnable = self._attempt(fence, now)
        if slot is not None:
            try:
                with transaction(M) as tx:
                    self._start_taking_slot(tx, operation_id, actions, runnable, slot, now)
            except TransactionFailed as failed:
                if ROW not in failed.failed:
                    raise failed.mapped(
                        [("slot", lambda: self.flow.limit_reached(slot.counter, slot.maximum))]
                    ) from failed.cause
                # Not runnable, or the row already holds a slot (an earlier attempt died): keep that slot.
                runnable &= M.running_slot.exists()
            else:
                if current is not None:  # the row as it was, plus what this transaction set: no extra read
                    return current.attempt_started(fence, now, slot.counter)
                op = self.get(operation_id)
                assert op is not None
                return op
        item = M(operation_id)
        if not conditionally(lambda: item.update(actions=actions, condition=runnable)):
            raise NotRunnable(operation_id)
        return to_operation(item)

    def schedule_retry(self, op: Operation, fence: int, error: ErrorInfo, not_before: float, now: float) -> None:
        M = self.M
        actions: list[Action] = [
            M.status.set(Status.QUEUED.value),
            M.error.set(_error_dict(error)),
            M.not_before.set(not_before),
            M.updated_at.set(now),
        ]
        slot = op.running_slot
        condition = (M.status == Status.RUNNING.value) & (M.fence == fence) & _same(M.running_slot, slot)
        if slot is None:
            if not conditionally(lambda: M(op.operation_id).update(actions=actions, condition=condition)):
                raise StaleFence(op.operation_id)
            return
        try:
            with transaction(M) as tx:
                tx.update(ROW, M(op.operation_id), [*actions, M.running_slot.remove()], condition=condition)
                self.flow.release(tx, (slot,), None, now)
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
        actions = [M.status.set(Status.DEAD.value), M.error.set(_error_dict(error))]
        if evidence is not None:
            actions.append(M.evidence.set(evidence))
        self._end(op, actions, condition, now)

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
        self._end(op, actions, condition, now)

    def _end(self, op: Operation, actions: list[Any], condition: Any, now: float) -> None:
        """The terminal transition and the release of everything the row holds, in one transaction, while the row
        holds exactly what `op` read: its epoch (what `holds` was written for), share place, wait and slot."""
        M = self.M
        actions = [
            *actions,
            M.finished_at.set(now),
            M.updated_at.set(now),
            M.holds.remove(),
            M.share.remove(),
            M.running_slot.remove(),
            M.waiting_for.remove(),
            M.waiting_at.remove(),
        ]
        condition &= (
            (M.epoch == op.epoch)
            & _same(M.share, op.share)
            & _same(M.running_slot, op.running_slot)
            & _same(M.waiting_at, op.waiting_at)
        )
        released = held_by(op)
        if not released and op.waiting_at is None:
            if not conditionally(lambda: M(op.operation_id).update(actions=actions, condition=condition)):
                raise NotRunnable(op.operation_id)
            return
        try:
            with transaction(M) as tx:
                tx.update(ROW, M(op.operation_id), actions, condition=condition)
                self.flow.release(tx, released, op.waiting_at, now)
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
        placed = _placed(share)
        holds = tuple(slot.counter for slot in limits)
        actions = [
            M.status.set(Status.ACCEPTED.value),
            M.epoch.set(op.epoch + 1),
            M.attempt.set(0),
            M.updated_at.set(now),
            M.error.remove(),
            M.evidence.remove(),
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
            errors = [(ROW, lambda: NotRunnable(op.operation_id)), *self._share_refusals(share)]
            raise failed.mapped([*errors, *self.flow.refusals(limits, None, op.principal)]) from failed.cause
        revived = self.get(op.operation_id)
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

    def list(self, *, site_id: str | None = None, status: Status | None = None, limit: int = 100) -> list[Operation]:
        """Newest first: by creation for a site (the by-site index), by last update for a status (by-status) and for
        the whole table (a scan, sorted here). Index reads are eventually consistent on AWS."""
        M = self.M
        if site_id is not None:
            condition = M.status == status.value if status else None
            items = M.by_site.query(site_id, filter_condition=condition, scan_index_forward=False)
        elif status is not None:
            items = M.by_status.query(status.value, scan_index_forward=False)
        else:
            items = M.scan()
        out = []
        for item in items:
            out.append(to_operation(item))
            if len(out) >= limit:
                break
        if site_id is None and status is None:
            out.sort(key=lambda op: op.created_at, reverse=True)
        return out


class Placed(NamedTuple):
    """What a row records of its placement in a share: the place it took, or the share it waits for and where."""

    share: str | None = None
    waiting_for: str | None = None
    waiting_at: str | None = None


def _placed(share: Placement | None) -> Placed:
    if share is None:
        return Placed()
    if share.waits:
        return Placed(None, share.group, share.slot.counter)
    return Placed(share.slot.counter)


def _same(attribute: Any, value: str | None) -> Any:
    """The row's attribute is `value` (absent when None)."""
    return attribute.does_not_exist() if value is None else attribute == value
