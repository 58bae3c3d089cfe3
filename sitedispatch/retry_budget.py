"""The global retry budget: retries may be at most a fraction (~10%) of recent executions.

When a dependency fails everywhere at once, every operation would retry on its own backoff and the retries would
become most of the load. Attempts are counted per minute (two counters); a retry decided while retries exceed the
budget over the current and previous minute is deferred for longer instead (its attempt is already spent, so the
operation still ends within its budget).
"""

from __future__ import annotations

from typing import Protocol


class Counters(Protocol):
    def add(self, counter_id: str, amount: int) -> None: ...

    def value(self, counter_id: str) -> int: ...


def _minute(now: float) -> int:
    return int(now // 60)


class RetryBudget:
    def __init__(self, counters: Counters, ratio: float, minimum_retries: int) -> None:
        self.counters = counters
        self.ratio = ratio
        self.minimum_retries = minimum_retries

    def record_attempt(self, attempt: int, now: float) -> None:
        """Count an attempt (a retry when it is not the operation's first)."""
        minute = _minute(now)
        self.counters.add(f"executions#{minute}", 1)
        if attempt > 1:
            self.counters.add(f"retries#{minute}", 1)

    def exhausted(self, now: float) -> bool:
        minute = _minute(now)
        executions = sum(self.counters.value(f"executions#{m}") for m in (minute - 1, minute))
        retries = sum(self.counters.value(f"retries#{m}") for m in (minute - 1, minute))
        return retries >= self.minimum_retries and retries > self.ratio * executions
