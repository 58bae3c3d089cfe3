"""Placing an operation on the shards of its limits and its share: the home shard first, another only when the
home is full, a read only then.

A shard refused alone is not the limit refused: the group's shards are read (one BatchGetItem) and the operation
tries the one with the most room; only when none has room is the limit reached, reported with the group's sum.
A share is placed the same way, with one rule more: a site's operations wait in order, so an operation takes a
place away from its home shard only while nothing waits there (where its site's earlier operations would wait),
and otherwise waits there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from sitedispatch.domain.errors import LimitReached, ShareMoved, TransientError
from sitedispatch.domain.model import Operation
from sitedispatch.domain.ports import CounterReading, OperationStore, Placement, Slot
from sitedispatch.flow.admission import Limit
from sitedispatch.flow.counters import Group

# A placement the counters moved under (a release, other submits) is tried again this many times in all.
PLACEMENT_TRIES = 8

Write = Callable[[tuple[Slot, ...], Placement | None], Operation]
T = TypeVar("T")


def room(group: Group, k: int, reading: CounterReading) -> int:
    maximum = group.shard_maximum(k) if reading.maximum is None else reading.maximum
    return maximum - reading.value


def readings(operations: OperationStore, group: Group) -> list[CounterReading]:
    found = operations.read_counters(group.shard_ids())
    return [found.get(counter, CounterReading(0)) for counter in group.shard_ids()]


def roomiest(operations: OperationStore, group: Group, exclude: int | None = None) -> int | None:
    """The shard of `group` with the most room (None: every shard is full, or the group as a whole is: a maximum
    lowered below what is held leaves some shards under their part while others are over it)."""
    shards = readings(operations, group)
    if sum(room(group, k, reading) for k, reading in enumerate(shards)) <= 0:
        return None
    best = max((k for k in range(group.shards) if k != exclude), key=lambda k: room(group, k, shards[k]), default=None)
    return best if best is not None and room(group, best, shards[best]) > 0 else None


def reached(operations: OperationStore, group: Group) -> LimitReached:
    """The whole group at its maximum: the sum of its shards against the sum of their maxima."""
    shards = readings(operations, group)
    maximum = sum(
        group.shard_maximum(k) if reading.maximum is None else reading.maximum for k, reading in enumerate(shards)
    )
    return LimitReached(group.name, sum(reading.value for reading in shards), maximum)


def next_placement(operations: OperationStore, share: Group, home: int, tried: Placement) -> Placement:
    """Where to place after `tried` was refused: from the home shard to the roomiest other (while nothing waits at
    home), from there to waiting at home, and from a wait refused (room appeared) back to the home shard."""
    home_slot = share.slot(home)
    if tried.waits:
        return Placement(home_slot, share.name)
    if tried.guard is None:
        shards = readings(operations, share)
        if shards[home].waiting == 0:
            candidates = [k for k in range(share.shards) if k != home and shards[k].waiting == 0]
            best = max(candidates, key=lambda k: room(share, k, shards[k]), default=None)
            if best is not None and room(share, best, shards[best]) > 0:
                return Placement(share.slot(best), share.name, guard=home_slot.counter)
    return Placement(home_slot, share.name, waits=True)


def place(
    operations: OperationStore,
    op: Operation,
    limits: Sequence[Limit],
    share: Group | None,
    write: Write,
) -> Operation:
    """Run `write(slots, placement)` (the store's create or revive) until it is placed: a limit's shard full
    moves to the roomiest shard of that limit; a share refused moves as next_placement says. LimitReached (with
    the group's name and sum) when a limit has no room on any shard; UnclaimedSite and the rest propagate."""
    chosen = [limit.group.home(limit.placed_by) for limit in limits]
    home = share.home(op.site_id) if share is not None else 0
    placement = Placement(share.slot(home), share.name) if share is not None else None
    for _ in range(PLACEMENT_TRIES):
        slots = tuple(limit.group.slot(k) for limit, k in zip(limits, chosen, strict=True))
        try:
            return write(slots, placement)
        except LimitReached as full:
            at = next((i for i, limit in enumerate(limits) if limit.group.index_of(full.counter) is not None), None)
            if at is None:
                raise
            group = limits[at].group
            if group.shards == 1:
                raise
            other = roomiest(operations, group, exclude=chosen[at])
            if other is None:
                raise reached(operations, group) from None
            chosen[at] = other
        except ShareMoved:
            assert share is not None and placement is not None
            placement = next_placement(operations, share, home, placement)
    raise TransientError(f"operation {op.operation_id}: the counters it was placed on moved {PLACEMENT_TRIES} times")


def on_a_shard(operations: OperationStore, group: Group, placed_by: str, attempt: Callable[[Slot], T]) -> T:
    """`attempt(slot)` on the home shard, then, while the group as read has room, on its roomiest shard (read again
    after each refusal: another worker may take the place first). LimitReached when the group is full."""
    k = group.home(placed_by)
    for _ in range(group.shards + 1):
        try:
            return attempt(group.slot(k))
        except LimitReached:
            other = roomiest(operations, group)
            if other is None:
                raise
            k = other
    raise reached(operations, group)
