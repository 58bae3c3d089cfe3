"""The operations table (and the flow counters its transitions move, through aws/flow.py): DynamoDB's
OperationStore. Here: creating operations (one, or a batch's groups), reading them and their deliveries, releasing
waiting ones and the counters; an attempt's transitions are aws/attempts.py's, the row's mapping aws/operation_rows.py.

Every guard is a condition expression evaluated by DynamoDB; a failed one is mapped to a typed domain error.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from sitedispatch.aws.attempts import AttemptTransitions
from sitedispatch.aws.events import EventOutbox
from sitedispatch.aws.flow import SHARE, FlowCounters, to_key_rates
from sitedispatch.aws.operation_rows import (
    ROW,
    RUNNABLE_VALUES,
    SITE,
    placement_of,
    read_operation,
    same_or_absent,
    share_refusals,
    to_operation,
    unsent_record,
)
from sitedispatch.aws.paging import FIRST_ROWS, PAGE_ROWS, read_page, request_rows, start_key
from sitedispatch.aws.sites import new_site, to_site
from sitedispatch.aws.tables import UNSENT, Models, OperationItem, dead_class_key, index_shard, index_shards
from sitedispatch.aws.writes import (
    TransactionFailed,
    conditionally,
    get_items,
    read_all,
    transaction,
)
from sitedispatch.domain.errors import AlreadyExists, SiteRegistered
from sitedispatch.domain.model import Kind, Operation, Status
from sitedispatch.domain.paging import Page
from sitedispatch.domain.ports import (
    RELEASE_LOOKAHEAD,
    CounterReading,
    Delivery,
    Move,
    Placement,
    SiteOwner,
    Slot,
    UnsentGroup,
)
from sitedispatch.flow.counters import site_counter


class DynamoOperationStore(AttemptTransitions):
    def __init__(self, models: Models, outbox: EventOutbox) -> None:
        self.M = models.Operation
        self.S = models.Site
        self.C = models.Counter
        self.flow = FlowCounters(models)
        self.outbox = outbox

    def create(
        self,
        op: Operation,
        limits: Sequence[Slot] = (),
        owner: SiteOwner | None = None,
        share: Placement | None = None,
    ) -> Operation:
        M = self.M
        placed = placement_of(share)
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
                *share_refusals(share),
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
                        & same_or_absent(M.waiting_at, op.waiting_at)
                        & M.status.is_in(*RUNNABLE_VALUES),
                    )
                    self.flow.take_released(tx, into, op.waiting_at, now)
            except TransactionFailed as failed:
                if SHARE in failed.failed:
                    break  # no room: the next finish releases
                continue  # released by another, or ended, since the index showed it
            released.append(replace(op, waiting_for=None, waiting_at=None, share=into.counter, updated_at=now))
        return released

    def hand_over(self, op: Operation, group: str, now: float, passing: Kind) -> Operation | None:
        M, C = self.M, self.C
        if op.share is None:
            return None
        passed: set[str] = set()  # sites with an operation of the passed kind waiting ahead
        for item in M.by_waiting.query(group, scan_index_forward=True, limit=RELEASE_LOOKAHEAD):
            other = to_operation(item)
            if other.kind == passing or other.site_id in passed:
                passed.add(other.site_id)
                continue
            try:
                with transaction(M) as tx:
                    tx.update(
                        ROW,
                        M(op.operation_id),
                        [M.share.remove(), M.updated_at.set(now)],
                        condition=(M.share == op.share) & (M.epoch == op.epoch) & M.status.is_in(*RUNNABLE_VALUES),
                    )
                    tx.update(
                        f"{ROW}:{other.operation_id}",
                        M(other.operation_id),
                        [M.waiting_for.remove(), M.waiting_at.remove(), M.share.set(op.share), M.updated_at.set(now)],
                        condition=(M.waiting_for == group)
                        & same_or_absent(M.waiting_at, other.waiting_at)
                        & M.status.is_in(*RUNNABLE_VALUES),
                    )
                    if other.waiting_at is not None:  # the place stays on its shard: only the wait ends
                        tx.update(SHARE, C(other.waiting_at), [C.waiting.add(-1), C.changed_at.set(now)])
            except TransactionFailed as failed:
                if ROW in failed.failed:
                    return None  # not as read: it holds no place to hand over
                continue  # released by another, or ended, since the index showed it
            return replace(other, waiting_for=None, waiting_at=None, share=op.share, updated_at=now)
        return None

    def relabel_site(self, site_id: str, label: str) -> bool:
        return self.flow.relabel(site_counter(site_id), label)

    def counter(self, counter_id: str) -> int:
        return self.flow.counter(counter_id)

    def counters(self, prefix: str = "") -> dict[str, int]:
        return self.flow.scan(prefix)

    def read_counters(self, counter_ids: Sequence[str]) -> dict[str, CounterReading]:
        return self.flow.read(counter_ids)

    def held_counter_ids(self) -> list[str]:
        return self.flow.held_ids()

    def held_counters(self) -> dict[str, CounterReading]:
        return self.flow.held()

    def repair_counter(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        return self.flow.repair(counter_id, observed, value, quiet_since, now)

    def forget_counter(self, counter_id: str, quiet_since: float) -> bool:
        return self.flow.forget(counter_id, quiet_since)

    def get(self, operation_id: str) -> Operation | None:
        return read_operation(self.M, operation_id)

    def read_delivery(
        self, operation_id: str, site_id: str, shares: Sequence[str] = (), key_rates: Sequence[str] = ()
    ) -> Delivery:
        wanted: list[tuple[Any, ...]] = [(self.M, operation_id), (self.S, site_id)]
        wanted += [(self.flow.C, share) for share in shares]
        wanted += [(self.flow.C, counter) for counter in key_rates]
        op_item, site_item, *counters = get_items(*wanted)
        shared, rated = counters[: len(shares)], counters[len(shares) :]
        waiting = sum(int(cast(Any, item).waiting or 0) for item in shared if item is not None)
        return Delivery(
            None if op_item is None else to_operation(op_item),  # type: ignore[arg-type]
            None if site_item is None else to_site(site_item),  # type: ignore[arg-type]
            waiting,
            tuple(to_key_rates(cast(Any, item)) for item in rated if item is not None and cast(Any, item).spec),
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

    def page(
        self,
        *,
        site_id: str | None = None,
        status: Status | None = None,
        accept: Callable[[Operation], bool] = lambda op: True,
        cursor: str | None = None,
        limit: int = 100,
        reads: int = 1000,
    ) -> Page[Operation]:
        """Reads at most `reads` rows (DynamoDB pages of at most that many) and stops at `limit` accepted; the
        cursor is the key of the last row read (pynamodb rebuilds it mid-page), so the next read starts after it."""
        M = self.M
        read = "site" if site_id is not None else "status" if status is not None else "scan"
        start = start_key(cursor, read, _KEYS[read])
        size = request_rows(limit, reads)
        items: Any
        if site_id is not None:  # a status is filtered here, not by DynamoDB: every row read counts
            items = M.by_site.query(site_id, scan_index_forward=False, last_evaluated_key=start, page_size=size)
        elif status is not None:
            items = M.by_status.query(status.value, scan_index_forward=False, last_evaluated_key=start, page_size=size)
        else:
            items = M.scan(last_evaluated_key=start, page_size=size)
        wanted = (lambda op: op.status == status and accept(op)) if status is not None else accept
        return read_page(items, to_operation, wanted, limit, reads, read)

    def oldest(self, status: Status, groups: Mapping[str, Collection[Kind]], reads: int = 500) -> dict[str, Operation]:
        M = self.M
        group_of = {kind: group for group, kinds in groups.items() for kind in kinds}
        found: dict[str, Operation] = {}
        condition = M.kind.is_in(*sorted(kind.value for kind in group_of))
        start, size, scanned = None, FIRST_ROWS, 0
        while group_of and len(found) < len(groups) and scanned < reads:
            # one request at a time, each reading ten times the rows of the last: the oldest row usually settles
            # it, and every row returned is a whole item (on moto ~1 ms each)
            pages = M.by_status.query(
                status.value,
                scan_index_forward=True,
                filter_condition=condition,
                page_size=size,
                last_evaluated_key=start,
            ).page_iter
            page = next(pages)
            scanned += int(page.get("ScannedCount", 0))
            for raw in page.get("Items", ()):
                op = to_operation(M.from_raw_data(raw))
                found.setdefault(group_of[op.kind], op)
            start = pages.last_evaluated_key
            if start is None:
                break
            size = min(size * 10, PAGE_ROWS)
        return found

    def dead_ids_of_class(self, code: str, reads: int = 10_000) -> Sequence[str]:
        return [item.operation_id for item in self.M.by_dead_class.query(dead_class_key(code), limit=reads)]

    def dead_of_class(self, code: str, reads: int = 10_000) -> Sequence[Operation]:
        rows = (to_operation(item) for item in read_all(self.M, list(self.dead_ids_of_class(code, reads))))
        return [op for op in rows if op.status == Status.DEAD and op.error_code == code]

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


# The key attributes of each read's rows (a cursor's position): the table's, and its index's.
_KEYS = {
    "site": {"operation_id": "S", "site_id": "S", "created_at": "N"},
    "status": {"operation_id": "S", "status": "S", "updated_at": "N"},
    "scan": {"operation_id": "S"},
}
