"""Batch submit: many operations of one principal in one call, each answered as a single submit would answer it.

Every item is validated first (a refused item writes nothing). The rest are created a group at a time, in one
transaction per group: the rows, already `queued`, each counter moved once by the count of the group's places on it
(their home shards, and for the share the shards with room as read once per batch), and a record of the group as
unsent. A group the transaction refuses (an id already taken by a retried batch, a counter too full or under a
quota, a site not yet claimed) is created one by one, as single submits are, which tells each item's answer apart.
Then the messages go ten to a request; the groups' unsent records are deleted (25 to a request) and the operations
created one by one are marked queued, each. A crash before the records go leaves them for the reconciler, which
sends their operations again (SQS drops a repeat within its deduplication window; the worker skips what is done).

Order: a site's items keep their order. Once one of a site's items goes one by one (it may wait for its share), its
later items do too, so none overtakes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sitedispatch import observability as obs
from sitedispatch.concurrency import pool
from sitedispatch.domain.errors import (
    AlreadyExists,
    IdempotencyConflict,
    InvalidInput,
    SiteDispatchError,
    TransientError,
)
from sitedispatch.domain.model import Kind, Operation, Status, lane_for
from sitedispatch.domain.ports import Move
from sitedispatch.flow.admission import limits_for, message_for, share_group_for
from sitedispatch.flow.counters import Group, share_label, site_counter
from sitedispatch.flow.placement import readings, room
from sitedispatch.operations.submission import Submitted, Submitter

MAX_ITEMS = 500
GROUP_ROWS = 16  # rows in one transaction: with their counters and sites under its 100 items
MARKERS = 8  # operations marked queued at once
TRANSACTION_ITEMS = 100  # DynamoDB's most items in one TransactWriteItems


@dataclass(frozen=True)
class BatchItem:
    kind: str
    site_id: str
    idempotency_key: str
    params: dict[str, Any]
    tenant: str | None = None
    raw_size: int | None = None


@dataclass(frozen=True)
class ItemAnswer:
    """One item's answer: the operation (new, or the same one again), or the refusal a single submit would get."""

    submitted: Submitted | None = None
    error: SiteDispatchError | None = None


@dataclass
class _Pending:
    index: int
    op: Operation


class BatchSubmitter:
    def __init__(self, submitter: Submitter) -> None:
        self.submitter = submitter
        self.deps = submitter.deps
        self.claimed: set[str] = set()  # sites this batch's groups claimed (their next groups only check)
        self.groups: list[str] = []  # the groups created, each recorded unsent until its messages are sent

    def submit(self, principal: str, items: Sequence[BatchItem]) -> list[ItemAnswer]:
        """Answer every item, in order."""
        if not 1 <= len(items) <= MAX_ITEMS:
            raise InvalidInput(f"a batch holds 1..{MAX_ITEMS} items, got {len(items)}", field="items")
        answers: list[ItemAnswer | None] = [None] * len(items)
        pending: list[_Pending] = []
        first_of: dict[str, int] = {}  # operation id -> the item that creates it
        repeats: list[tuple[int, Operation]] = []
        for index, item in enumerate(items):
            try:
                op, body = self.submitter.prepare(
                    kind=item.kind,
                    site_id=item.site_id,
                    principal=principal,
                    params=item.params,
                    idempotency_key=item.idempotency_key,
                    raw_size=item.raw_size,
                    tenant=item.tenant,
                )
            except SiteDispatchError as refused:
                answers[index] = ItemAnswer(error=refused)
                continue
            if op.operation_id in first_of:
                repeats.append((index, op))  # the same key twice in one batch: answered as a retry would be
                continue
            first_of[op.operation_id] = index
            self.submitter.keep_input(op, body)
            pending.append(_Pending(index, op))
        created = self._create(pending, answers)
        self._send(created, answers)
        for index, op in repeats:
            answers[index] = self._repeat(op, answers[first_of[op.operation_id]])
        return [answer or ItemAnswer(error=InvalidInput("not answered")) for answer in answers]

    def _create(self, pending: list[_Pending], answers: list[ItemAnswer | None]) -> list[_Pending]:
        """Create every pending item: in groups while they fit, else one by one. What was created, in order."""
        d = self.deps
        shares: dict[str, list[int | None]] = {}  # share -> each shard's room as read once, then counted off
        one_by_one: set[str] = set()  # sites whose items go one by one from here on
        created: list[_Pending] = []
        group: list[_Pending] = []

        def flush() -> None:
            if group and not self._create_group(group):
                one_by_one.update(p.op.site_id for p in group)
                for p in group:
                    self._create_one(p, answers, created)
            elif group:
                created.extend(group)
                for p in group:
                    answers[p.index] = ItemAnswer(Submitted(p.op, True))
                obs.count(obs.Metric.OperationAccepted, len(group))
            group.clear()

        labels = self.submitter.deps.labels
        for p in pending:
            share = share_group_for(d.settings, p.op, labels.get(p.op.site_id))
            k = None if p.op.site_id in one_by_one else self._take(share, shares, p.op.site_id)
            if k is None:
                flush()
                one_by_one.add(p.op.site_id)
                self._create_one(p, answers, created)
                continue
            slots = [limit.group.home_slot(limit.placed_by) for limit in limits_for(d.settings, p.op)]
            p.op = replace(p.op, holds=tuple(slot.counter for slot in slots), share=share.shard(k))
            if group and transaction_items([*group, p]) > TRANSACTION_ITEMS:
                flush()  # many tenants or sites: fewer rows, so the items stay within one transaction
            group.append(p)
            if len(group) == GROUP_ROWS:
                flush()
        flush()
        return created

    def _take(self, share: Group, shares: dict[str, list[int | None]], site_id: str) -> int | None:
        """A shard of the share with room for one more, counted off: the home shard first, another only while
        nothing waits at home (where the site's earlier operations would wait). None when there is none, or the
        home shard has someone waiting or a quota (those go one by one)."""
        if share.name not in shares:
            shares[share.name] = [
                room(share, k, reading) if reading.waiting == 0 and reading.maximum is None else None
                for k, reading in enumerate(readings(self.deps.operations, share))
            ]
        left = shares[share.name]
        home = share.home(site_id)
        if left[home] is None:
            return None
        open_shards = [k for k in range(share.shards) if (left[k] or 0) > 0]
        if not open_shards:
            return None
        k = home if home in open_shards else max(open_shards, key=lambda n: left[n] or 0)
        left[k] = (left[k] or 0) - 1
        return k

    def _create_group(self, group: list[_Pending]) -> bool:
        limits = [limits_for(self.deps.settings, p.op) for p in group]
        counts: Counter[str] = Counter()
        maxima: dict[str, tuple[int, bool, bool]] = {}
        for p, op_limits in zip(group, limits, strict=True):
            for limit, counter in zip(op_limits, p.op.holds, strict=True):
                counts[counter] += 1
                k = limit.group.index_of(counter) or 0
                maxima[counter] = (limit.group.shard_maximum(k), limit.name == "site", False)
            share = share_group_for(self.deps.settings, p.op)
            assert p.op.share is not None
            counts[p.op.share] += 1
            maxima[p.op.share] = (share.shard_maximum(share.index_of(p.op.share) or 0), False, True)
        # a site whose first operation here is a provision is most often new: registered and claimed with the group
        firsts: dict[str, Operation] = {}
        for p in group:
            firsts.setdefault(p.op.site_id, p.op)
        registers = {
            site_counter(site_id): site_id
            for site_id, op in firsts.items()
            if op.kind == Kind.PROVISION and site_id not in self.claimed
        }
        labels = {site_counter(p.op.site_id): share_label(p.op.share) for p in group}
        moves = [
            Move(
                c,
                n,
                maxima[c][0],
                owner=maxima[c][1],
                share=maxima[c][2],
                register=registers.get(c),
                label=labels.get(c, ""),
            )
            for c, n in counts.items()
        ]
        now = self.deps.clock.now()  # admitted and queued: its message is sent next, or by the reconciler
        queued = [replace(p.op, status=Status.QUEUED, queued_at=now, updated_at=now) for p in group]
        try:
            created = self.deps.operations.create_group(queued, moves)
        except TransientError:  # its transaction met others past its patience: one by one, as single submits
            return False
        if created:
            self.claimed.update(firsts)
            self.groups.append(queued[0].operation_id)
            for p, op in zip(group, queued, strict=True):
                p.op = op
        return created

    def _create_one(self, p: _Pending, answers: list[ItemAnswer | None], created: list[_Pending]) -> None:
        """As a single submit creates it (its own placement, refusals and repeats)."""
        op = replace(p.op, holds=(), share=None, status=Status.ACCEPTED, queued_at=None)
        try:
            p.op = self.submitter.create(op)
        except AlreadyExists:
            try:
                answers[p.index] = ItemAnswer(self.submitter.existing(op))
            except SiteDispatchError as conflict:
                answers[p.index] = ItemAnswer(error=conflict)
            return
        except SiteDispatchError as refused:
            answers[p.index] = ItemAnswer(error=refused)
            return
        answers[p.index] = ItemAnswer(Submitted(p.op, True))
        created.append(p)

    def _send(self, created: list[_Pending], answers: list[ItemAnswer | None]) -> None:
        """Messages ten to a request per lane, in order; then the groups' unsent records deleted, and each operation
        created one by one marked queued. A crash before that leaves unsent records, or `accepted` rows, that the
        reconciler sends again (a repeat is dropped by SQS)."""
        d = self.deps
        to_send = [p for p in created if not p.op.waiting_for]
        for lane in sorted({lane_for(p.op.kind) for p in to_send}):
            in_lane = [p for p in to_send if lane_for(p.op.kind) == lane]
            d.queue.send_many([(message_for(p.op), p.op.dedup_id) for p in in_lane], lane)
        if self.groups:
            d.operations.sent(self.groups)
        sent_at = d.clock.now()
        singles = [p for p in to_send if p.op.status == Status.ACCEPTED]
        with pool(MARKERS, "queued-marker") as markers:  # independent single writes: at once, not one after another
            marked = list(markers.map(lambda p: self.submitter.queued(p.op, sent_at), singles))
        for p, op in zip(singles, marked, strict=True):
            answers[p.index] = ItemAnswer(Submitted(op, True))

    @staticmethod
    def _repeat(op: Operation, first: ItemAnswer | None) -> ItemAnswer:
        """An item naming the same operation as an earlier one: the same operation again, or a conflict if its
        input differs; if the earlier one was refused, the same refusal."""
        if first is None or first.submitted is None:
            return first or ItemAnswer(error=InvalidInput("not answered"))
        earlier = first.submitted.operation
        if earlier.input_digest != op.input_digest:
            return ItemAnswer(
                error=IdempotencyConflict(
                    f"idempotency key already used by {earlier.operation_id} with a different input "
                    f"(digest {earlier.input_digest[:12]}…, this input {op.input_digest[:12]}…)"
                )
            )
        return ItemAnswer(Submitted(earlier, created=False))


def transaction_items(group: Sequence[_Pending]) -> int:
    """The items a group's transaction writes: its rows, each counter once, (at most) each site's registration,
    and the group's unsent record."""
    counters = {counter for p in group for counter in (*p.op.holds, p.op.share)}
    return len(group) + len(counters) + len({p.op.site_id for p in group}) + 1
