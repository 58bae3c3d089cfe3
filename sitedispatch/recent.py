"""What happened recently, counted per minute in the counters table.

Two readers share these counts: the global retry budget (attempts and retries over the last two minutes) and each
principal's measured pace per lane (completions and their busy time over the last five minutes), which the estimated
delays use. Each count lives in a ring of RING_MINUTES buckets (`NAME@minute % RING_MINUTES`), each bucket stamped
with its minute: a bucket from an older minute is overwritten, not added to, so the table holds a bounded number of
items per name (no expiry to wait for, and the reconciler's scan of the counters table stays small). They are
statistics, not state: a count lost to a crash between a commit and its count only makes an estimate less informed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

RING_MINUTES = 10
PACE_WINDOW_MINUTES = 5
RETRY_WINDOW_MINUTES = 2


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


def bucket_id(name: str, minute: int) -> str:
    return f"{name}@{minute % RING_MINUTES}"


class MinuteCounts:
    def __init__(self, buckets: MinuteBuckets) -> None:
        self.buckets = buckets

    def add(self, name: str, now: float, count: int = 1, amount: int = 0) -> None:
        minute = minute_of(now)
        self.buckets.add(bucket_id(name, minute), minute, count, amount)

    def totals(self, name: str, now: float, minutes: int) -> tuple[int, int]:
        """(count, amount) over the current minute and the `minutes - 1` before it."""
        assert 0 < minutes < RING_MINUTES
        current = minute_of(now)
        window = range(current - minutes + 1, current + 1)
        found = self.buckets.read([bucket_id(name, m) for m in window])
        inside = [b for m in window if (b := found.get(bucket_id(name, m))) is not None and b.minute == m]
        return sum(b.count for b in inside), sum(b.amount for b in inside)


class RetryBudget:
    """The global retry budget: retries may be at most a fraction (~10%) of recent executions.

    When a dependency fails everywhere at once, every operation would retry on its own backoff and the retries would
    become most of the load. A retry decided while retries exceed the budget over the current and previous minute is
    deferred for longer instead (its attempt is already spent, so the operation still ends within its budget).
    """

    NAME = "attempts"

    def __init__(self, counts: MinuteCounts, ratio: float, minimum_retries: int) -> None:
        self.counts = counts
        self.ratio = ratio
        self.minimum_retries = minimum_retries

    def record_attempt(self, attempt: int, now: float) -> None:
        """Count an attempt, and whether it is a retry (not the operation's first), in one write."""
        self.counts.add(self.NAME, now, 1, 1 if attempt > 1 else 0)

    def exhausted(self, now: float) -> bool:
        executions, retries = self.counts.totals(self.NAME, now, RETRY_WINDOW_MINUTES)
        return retries >= self.minimum_retries and retries > self.ratio * executions


@dataclass(frozen=True)
class PaceReading:
    completions: int  # in the window
    mean_s: float | None  # their mean operation time (None: nothing completed in the window)


class Pace:
    """A principal's measured pace in one lane: how many of its operations completed in the last few minutes, and
    their mean time from attempt start to commit."""

    def __init__(self, counts: MinuteCounts, window_minutes: int = PACE_WINDOW_MINUTES) -> None:
        self.counts = counts
        self.window_minutes = window_minutes

    @staticmethod
    def name(lane: str, principal: str) -> str:
        return f"completed#{lane}#{principal}"

    def record(self, lane: str, principal: str, seconds: float, now: float) -> None:
        self.counts.add(self.name(lane, principal), now, 1, max(0, round(seconds * 1000)))

    def reading(self, lane: str, principal: str, now: float) -> PaceReading:
        count, busy_ms = self.counts.totals(self.name(lane, principal), now, self.window_minutes)
        return PaceReading(count, round(busy_ms / 1000 / count, 3) if count else None)


class Recent:
    """The per-minute counts and their two readers, built once per process."""

    def __init__(self, buckets: MinuteBuckets, retry_ratio: float, minimum_retries: int) -> None:
        self.counts = MinuteCounts(buckets)
        self.retry_budget = RetryBudget(self.counts, retry_ratio, minimum_retries)
        self.pace = Pace(self.counts)
