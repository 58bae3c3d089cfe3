"""The operations table (and the admission counters its transitions move): DynamoDB's OperationStore.

Every guard is a condition expression evaluated by DynamoDB; a failed one is mapped to a typed domain error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pynamodb.expressions.update import Action

from sitedispatch.aws.sites import to_site
from sitedispatch.aws.tables import HELD, Models, OperationItem, index_shard, index_shards
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
from sitedispatch.domain.errors import AlreadyExists, LimitReached, NotRunnable, StaleFence, UnclaimedSite
from sitedispatch.domain.model import RUNNABLE, ErrorInfo, Kind, Lease, Operation, Site, Status
from sitedispatch.domain.ports import Delivery, SiteOwner, Slot, foreign_site

RUNNABLE_VALUES = tuple(s.value for s in RUNNABLE)
ROW = "operation"  # the operation row's name in a transaction (counters are named `counter:ID`)
LEASE = "lease"  # the site's lease, claimed in the transaction that starts the attempt


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
        checkpoint=item.checkpoint,
        continuing=bool(item.continuing),
    )


# A submit finds its principal's share full, then (racing a release) not full: it tries again this many times.
SHARE_TRIES = 4
SHARE = "share"  # the share counter's name in a transaction


class DynamoOperationStore:
    def __init__(self, models: Models) -> None:
        self.M = models.Operation
        self.C = models.Counter
        self.S = models.Site

    def create(
        self,
        op: Operation,
        limits: Sequence[tuple[str, int]] = (),
        owner: SiteOwner | None = None,
        share: Slot | None = None,
    ) -> Operation:
        M = self.M
        item = M(
            op.operation_id,
            site_id=op.site_id,
            principal=op.principal,
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
        )

        def write(waits: bool) -> None:
            item.waiting_for = share.counter if share is not None and waits else None
            with transaction(M) as tx:
                tx.save(ROW, item, condition=M.operation_id.does_not_exist())
                self._admit(tx, limits, op.created_at, owner, op.principal)
                if share is not None:
                    self._take_or_wait(tx, share, waits, op.created_at)

        errors = [(ROW, lambda: AlreadyExists(op.operation_id)), *self._limit_errors(limits, owner, op.principal)]
        waits = self._placed(share, write, errors)
        return replace(op, waiting_for=share.counter if share is not None and waits else None)

    @staticmethod
    def _placed(share: Slot | None, write: Any, errors: Sequence[tuple[str, Any]]) -> bool:
        """Run `write(waits)`: first taking a place of `share`, and, when the share alone refused, waiting for it;
        a wait the share refuses (room appeared meanwhile) starts over. Whether it waits."""
        for _ in range(SHARE_TRIES):
            for waits in (False, True):
                try:
                    write(waits)
                except TransactionFailed as failed:
                    if share is not None and failed.failed == {SHARE}:
                        continue
                    raise failed.mapped(errors) from failed.cause
                return waits
        raise RuntimeError(f"share {share.counter if share else ''} changed {SHARE_TRIES} times during one submit")

    def _take_or_wait(self, tx: NamedTransaction, share: Slot, waits: bool, now: float) -> None:
        """One place of the share, while it has room and nothing waits for it (so what waits is sent first); or
        one more waiting for it, while it has no room or others wait."""
        C = self.C
        nothing_waits = C.waiting.does_not_exist() | (C.waiting == 0)
        room = under_limit(C, share.maximum) & nothing_waits
        if waits:
            actions = [C.waiting.add(1), C.changed_at.set(now), C.held.set(index_shard(HELD, share.counter))]
            tx.update(SHARE, C(share.counter), actions, condition=~room)
        else:
            tx.update(SHARE, C(share.counter), self._moved_up(share.counter, now), condition=room)

    def release_waiting(self, share: Slot, now: float, limit: int = 1) -> list[Operation]:
        M, C = self.M, self.C
        released: list[Operation] = []
        for item in M.by_waiting.query(share.counter, scan_index_forward=True, limit=limit + 2):
            if len(released) >= limit:
                break
            op = to_operation(item)
            try:
                with transaction(M) as tx:
                    tx.update(
                        ROW,
                        M(op.operation_id),
                        [M.waiting_for.remove(), M.updated_at.set(now)],
                        condition=(M.waiting_for == share.counter) & M.status.is_in(*RUNNABLE_VALUES),
                    )
                    tx.update(
                        SHARE,
                        C(share.counter),
                        [*self._moved_up(share.counter, now), C.waiting.add(-1)],
                        condition=under_limit(C, share.maximum),
                    )
            except TransactionFailed as failed:
                if SHARE in failed.failed:
                    break  # no room: the next finish releases
                continue  # released by another, or ended, since the index showed it
            released.append(replace(op, waiting_for=None, updated_at=now))
        return released

    def _admit(
        self,
        tx: NamedTransaction,
        limits: Sequence[tuple[str, int]],
        now: float,
        owner: SiteOwner | None = None,
        principal: str = "",
    ) -> None:
        C = self.C
        for counter, maximum in limits:
            actions = self._moved_up(counter, now)
            condition = under_limit(C, maximum)
            if owner is not None and counter == owner.counter:
                if owner.claim:
                    actions.append(C.owner.set(C.owner | principal))  # if_not_exists: the first claim stays
                    condition &= C.owner.does_not_exist() | (C.owner == principal)
                else:
                    condition &= C.owner == principal
            tx.update(f"counter:{counter}", C(counter), actions, condition=condition)

    def _limit_errors(
        self, limits: Sequence[tuple[str, int]], owner: SiteOwner | None = None, principal: str = ""
    ) -> list[tuple[str, Any]]:
        def refusal(counter: str, maximum: int) -> Exception:
            if owner is not None and counter == owner.counter:
                item = get_item(self.C, counter)
                named = item.owner if item is not None else None
                if named is None and not owner.claim:
                    return UnclaimedSite(counter)
                if named is not None and named != principal:
                    return foreign_site(counter.split("#", 1)[1])
            return self._limit_reached(counter, maximum)

        return [(f"counter:{counter}", lambda c=counter, m=maximum: refusal(c, m)) for counter, maximum in limits]

    def _moved_up(self, counter_id: str, now: float) -> list[Action]:
        """One more on a counter; it is in the by-held index (what the recount reads) until found zero and quiet."""
        C = self.C
        return [C.value.add(1), C.changed_at.set(now), C.held.set(index_shard(HELD, counter_id))]

    def counter(self, counter_id: str) -> int:
        item = get_item(self.C, counter_id)
        return 0 if item is None else int(item.value or 0)

    def _limit_reached(self, counter_id: str, default: int) -> LimitReached:
        item = get_item(self.C, counter_id)
        if item is None:
            return LimitReached(counter_id, 0, default)
        return LimitReached(counter_id, int(item.value or 0), default if item.maximum is None else int(item.maximum))

    def counters(self, prefix: str = "") -> dict[str, int]:
        return {item.counter_id: int(item.value or 0) for item in self.C.scan() if item.counter_id.startswith(prefix)}

    def held_counters(self) -> dict[str, int]:
        ids = [item.counter_id for shard in index_shards(HELD) for item in self.C.by_held.query(shard)]
        return {item.counter_id: int(item.value or 0) for item in read_all(self.C, ids)}

    def repair_counter(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        C = self.C
        unchanged = (C.value == observed) if observed else (C.value.does_not_exist() | (C.value == 0))
        quiet = C.changed_at.does_not_exist() | (C.changed_at <= quiet_since)
        held: Action = C.held.remove() if value == 0 else C.held.set(index_shard(HELD, counter_id))
        return conditionally(
            lambda: C(counter_id).update(
                actions=[C.value.set(value), C.changed_at.set(now), held], condition=unchanged & quiet
            )
        )

    def forget_counter(self, counter_id: str, quiet_since: float) -> bool:
        C = self.C
        zero = C.value.does_not_exist() | (C.value == 0)
        quiet = C.changed_at.does_not_exist() | (C.changed_at <= quiet_since)
        return conditionally(
            lambda: C(counter_id).update(actions=[C.held.remove()], condition=C.held.exists() & zero & quiet)
        )

    def get(self, operation_id: str) -> Operation | None:
        item = get_item(self.M, operation_id)
        return None if item is None else to_operation(item)

    def read_delivery(self, operation_id: str, site_id: str, share: str | None = None) -> Delivery:
        wanted: list[tuple[Any, ...]] = [(self.M, operation_id), (self.S, site_id)]
        if share:
            wanted.append((self.C, share))
        op_item, site_item, *counter = get_items(*wanted)
        waiting = int(counter[0].waiting or 0) if counter and counter[0] is not None else 0  # type: ignore[attr-defined]
        return Delivery(
            None if op_item is None else to_operation(op_item),  # type: ignore[arg-type]
            None if site_item is None else to_site(site_item),  # type: ignore[arg-type]
            waiting,
        )

    def mark_queued(self, operation_id: str, now: float) -> bool:
        M = self.M
        return conditionally(
            lambda: M(operation_id).update(
                actions=[M.status.set(Status.QUEUED.value), M.queued_at.set(now), M.updated_at.set(now)],
                condition=M.status == Status.ACCEPTED.value,
            )
        )

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
        as_read = (S.fence == site.fence) if site.fence else (S.fence.does_not_exist() | (S.fence == 0))
        free = S.lease_owner.does_not_exist() | (S.lease_owner == op.operation_id) | (S.lease_expires_at <= now)
        try:
            with transaction(M) as tx:
                tx.update(
                    LEASE,
                    S(site.site_id),
                    [S.fence.set(fence), S.lease_owner.set(op.operation_id), S.lease_expires_at.set(now + lease_s)],
                    condition=S.site_id.exists() & as_read & free,
                )
                if slot is None:  # the row takes no slot; one it held when read, it must still hold
                    kept = (M.running_slot == op.running_slot) if op.running_slot else M.running_slot.does_not_exist()
                    tx.update(ROW, M(op.operation_id), actions, condition=runnable & kept)
                else:
                    self._start_taking_slot(tx, op.operation_id, actions, runnable, slot, now)
        except TransactionFailed as failed:
            if slot is not None and failed.failed == {"slot"}:
                raise self._limit_reached(slot.counter, slot.maximum) from failed.cause
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
        M, C = self.M, self.C
        tx.update(
            ROW,
            M(operation_id),
            [*actions, M.running_slot.set(slot.counter)],
            condition=runnable & M.running_slot.does_not_exist(),
        )
        tx.update("slot", C(slot.counter), self._moved_up(slot.counter, now), condition=under_limit(C, slot.maximum))

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
                        [("slot", lambda: self._limit_reached(slot.counter, slot.maximum))]
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

    def schedule_retry(
        self, operation_id: str, fence: int, error: ErrorInfo, not_before: float, now: float, slot: str | None = None
    ) -> None:
        M = self.M
        actions = [
            M.status.set(Status.QUEUED.value),
            M.error.set(_error_dict(error)),
            M.not_before.set(not_before),
            M.updated_at.set(now),
        ]
        try:
            self._transition(
                operation_id, actions, (M.status == Status.RUNNING.value) & (M.fence == fence), (), slot, now
            )
        except NotRunnable as exc:
            raise StaleFence(operation_id) from exc

    def mark_dead(
        self,
        operation_id: str,
        fence: int | None,
        error: ErrorInfo,
        now: float,
        counters: Sequence[str] = (),
        slot: str | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        M = self.M
        condition = M.status.is_in(*RUNNABLE_VALUES)
        if fence is not None:
            condition &= M.fence == fence
        actions = [M.status.set(Status.DEAD.value), M.error.set(_error_dict(error))]
        if evidence is not None:
            actions.append(M.evidence.set(evidence))
        self._end(operation_id, actions, condition, counters, now, slot)

    def end(
        self,
        operation_id: str,
        status: Status,
        now: float,
        counters: Sequence[str],
        *,
        from_statuses: Sequence[Status],
        reason: str = "",
        superseded_by: str | None = None,
        slot: str | None = None,
        waiting: str | None = None,
    ) -> None:
        """-> cancelled or superseded, from one of `from_statuses` only, releasing the operation's counters."""
        M = self.M
        actions = [
            M.status.set(status.value),
            M.error.set({"error_class": status.value, "code": status.value, "message": reason, "retryable": False}),
        ]
        if superseded_by:
            actions.append(M.superseded_by.set(superseded_by))
        condition = M.status.is_in(*(s.value for s in from_statuses))
        self._end(operation_id, actions, condition, counters, now, slot, waiting)

    def _end(
        self,
        operation_id: str,
        actions: list[Any],
        condition: Any,
        counters: Sequence[str],
        now: float,
        slot: str | None,
        waiting: str | None = None,
    ) -> None:
        M = self.M
        actions = [*actions, M.finished_at.set(now), M.updated_at.set(now)]
        self._transition(operation_id, actions, condition, counters, slot, now, waiting)

    def _transition(
        self,
        operation_id: str,
        actions: list[Any],
        condition: Any,
        counters: Sequence[str],
        slot: str | None,
        now: float,
        waiting: str | None = None,
    ) -> None:
        """Update the operation row and release `counters` and its running `slot` in one transaction. The row must
        hold exactly the slot given (none when None), so a slot is released once, by whoever holds it; and wait for
        exactly the share given as `waiting` (none when None), which it then stops waiting for."""
        M, C = self.M, self.C
        if slot is not None:
            actions = [*actions, M.running_slot.remove()]
            condition &= M.running_slot == slot
            counters = (*counters, slot)
        else:
            condition &= M.running_slot.does_not_exist()
        if waiting is not None:
            actions = [*actions, M.waiting_for.remove()]
            condition &= M.waiting_for == waiting
        else:
            condition &= M.waiting_for.does_not_exist()
        if not counters and waiting is None:
            if not conditionally(lambda: M(operation_id).update(actions=actions, condition=condition)):
                raise NotRunnable(operation_id)
            return
        try:
            with transaction(M) as tx:
                tx.update(ROW, M(operation_id), actions, condition=condition)
                tx.decrement(C, counters, now)
                if waiting is not None:
                    tx.update(SHARE, C(waiting), [C.waiting.add(-1), C.changed_at.set(now)])
        except TransactionFailed as failed:
            raise failed.mapped([(ROW, lambda: NotRunnable(operation_id))]) from failed.cause

    def revive(
        self,
        operation_id: str,
        epoch: int,
        now: float,
        limits: Sequence[tuple[str, int]],
        new_input: tuple[str, str] | None = None,
        share: Slot | None = None,
    ) -> Operation:
        M = self.M
        actions = [
            M.status.set(Status.ACCEPTED.value),
            M.epoch.set(epoch + 1),
            M.attempt.set(0),
            M.updated_at.set(now),
            M.error.remove(),
            M.evidence.remove(),
            M.finished_at.remove(),
            M.not_before.remove(),
            M.queued_at.remove(),
            M.started_at.remove(),
        ]
        if new_input is not None:
            actions += [M.input_key.set(new_input[0]), M.input_digest.set(new_input[1]), M.inline_input.remove()]

        def write(waits: bool) -> None:
            waiting: Action = (
                M.waiting_for.set(share.counter) if share is not None and waits else M.waiting_for.remove()
            )
            with transaction(M) as tx:
                dead = (M.status == Status.DEAD.value) & (M.epoch == epoch)
                tx.update(ROW, M(operation_id), [*actions, waiting], condition=dead)
                self._admit(tx, limits, now)
                if share is not None:
                    self._take_or_wait(tx, share, waits, now)

        self._placed(share, write, [(ROW, lambda: NotRunnable(operation_id)), *self._limit_errors(limits)])
        op = self.get(operation_id)
        assert op is not None
        return op

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
