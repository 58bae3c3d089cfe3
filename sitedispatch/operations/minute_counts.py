"""Counts per minute in the counters table, for statistics that look a few minutes back.

Each count lives in a ring of RING_MINUTES buckets (`NAME@minute % RING_MINUTES`), each bucket stamped with its
minute: a bucket from an older minute is overwritten, not added to, so the table holds a bounded number of items per
name (no expiry to wait for, and the reconciler's scan of the counters table stays small). They are statistics, not
state: a count lost to a crash between a commit and its count only makes an estimate less informed. Two readers
share them: the retry budget (`retry_budget.py`) and each principal's pace (`pace.py`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

RING_MINUTES = 10
# Each minute's count is spread over shards (a writer picks one at random; a reader sums them in the same one
# BatchGetItem): the retry budget's bucket is written by every attempt, and one item takes ~1,000 writes a second.
SHARDS = 8


@dataclass(frozen=True)
class Bucket:
    minute: int
    count: int
    amount: int  # a second quantity counted with the first (retries among attempts; milliseconds of work)


class MinuteBuckets(Protocol):
    def add(self, bucket_id: str, minute: int, count: int, amount: int) -> None:
        """Add to the bucket if it holds `minute`; start it over at `minute` if it holds an older one."""
        ...

    def read(self, bucket_ids: Sequence[str]) -> dict[str, Bucket]:
        """The buckets named that exist, in one round trip."""
        ...


def minute_of(now: float) -> int:
    return int(now // 60)


def bucket_id(name: str, minute: int, shard: int = 0) -> str:
    return f"{name}@{minute % RING_MINUTES}" + (f"#{shard}" if shard else "")


class MinuteCounts:
    def __init__(self, buckets: MinuteBuckets, shards: int = SHARDS, rng: random.Random | None = None) -> None:
        self.buckets = buckets
        self.shards = shards
        self.rng = rng or random.Random()

    def add(self, name: str, now: float, count: int = 1, amount: int = 0) -> None:
        minute = minute_of(now)
        self.buckets.add(bucket_id(name, minute, self.rng.randrange(self.shards)), minute, count, amount)

    def totals(self, name: str, now: float, minutes: int) -> tuple[int, int]:
        """(count, amount) over the current minute and the `minutes - 1` before it."""
        assert 0 < minutes < RING_MINUTES
        current = minute_of(now)
        window = range(current - minutes + 1, current + 1)
        ids = {(m, shard): bucket_id(name, m, shard) for m in window for shard in range(self.shards)}
        found = self.buckets.read(list(ids.values()))
        inside = [b for (m, _), key in ids.items() if (b := found.get(key)) is not None and b.minute == m]
        return sum(b.count for b in inside), sum(b.amount for b in inside)
