"""Counts per minute in the counters table, for statistics that look a few minutes back.

Each minute's count is its own item (`NAME@MINUTE`, spread over shards), written by one unconditional UpdateItem
(ADD), stamped with its minute and an expiry a while after it (DynamoDB's TTL deletes it later; readers never look
that far back): one write per count, never a reset. They are statistics, not state: a count lost to a crash
between a commit and its count only makes an estimate less informed. Two readers share them: the retry budget
(`retry_budget.py`) and each principal's pace (`pace.py`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sitedispatch.domain.ports import Tally

KEEP_MINUTES = 60  # a minute's item expires this long after its minute (readers look at most a few minutes back)
READ_KEYS = 100  # BatchGetItem's most keys: minutes x shards of one read
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
        """Add to the minute's bucket (its first add creates it, stamped with `minute`); one write, always."""
        ...

    def read(self, bucket_ids: Sequence[str]) -> dict[str, Bucket]:
        """The buckets named that exist, in one round trip."""
        ...


def minute_of(now: float) -> int:
    return int(now // 60)


def bucket_id(name: str, minute: int, shard: int = 0) -> str:
    return f"{name}@{minute}" + (f"#{shard}" if shard else "")


def expires_at(minute: int) -> int:
    """When a minute's bucket may be deleted (epoch seconds, DynamoDB TTL's unit)."""
    return (minute + 1 + KEEP_MINUTES) * 60


class MinuteCounts:
    def __init__(self, buckets: MinuteBuckets, shards: int = SHARDS, rng: random.Random | None = None) -> None:
        self.buckets = buckets
        self.shards = shards
        self.rng = rng or random.Random()

    def add(self, name: str, now: float, count: int = 1, amount: int = 0) -> None:
        tally = self.tally(name, now, count, amount)
        self.buckets.add(tally.bucket_id, tally.minute, tally.count, tally.amount)

    def tally(self, name: str, now: float, count: int = 1, amount: int = 0) -> Tally:
        """The add `add` would make, for a caller that writes it in a transaction of its own (a commit)."""
        minute = minute_of(now)
        return Tally(bucket_id(name, minute, self.rng.randrange(self.shards)), minute, count, amount)

    def series(self, names: Sequence[str], now: float, minutes: int) -> dict[str, dict[int, tuple[int, int]]]:
        """Per name, per minute of the last `minutes` (the current one included): (count, amount), 0 where none;
        read READ_KEYS keys a round trip."""
        assert 0 < minutes <= KEEP_MINUTES
        current = minute_of(now)
        window = range(current - minutes + 1, current + 1)
        keys = {bucket_id(n, m, shard): (n, m) for n in names for m in window for shard in range(self.shards)}
        ids = list(keys)
        found: dict[str, Bucket] = {}
        for start in range(0, len(ids), READ_KEYS):
            found.update(self.buckets.read(ids[start : start + READ_KEYS]))
        out = {n: dict.fromkeys(window, (0, 0)) for n in names}
        for key, (n, m) in keys.items():
            bucket = found.get(key)
            if bucket is not None and bucket.minute == m:
                count, amount = out[n][m]
                out[n][m] = (count + bucket.count, amount + bucket.amount)
        return out

    def totals(self, name: str, now: float, minutes: int) -> tuple[int, int]:
        """(count, amount) over the current minute and the `minutes - 1` before it, in one round trip."""
        assert minutes * self.shards <= READ_KEYS
        per_minute = self.series((name,), now, minutes)[name].values()
        return sum(count for count, _ in per_minute), sum(amount for _, amount in per_minute)
