"""The global retry budget: retries may be at most a fraction (~10%) of recent executions."""

from __future__ import annotations

from sitedispatch.flow.minute_counts import MinuteCounts

RETRY_WINDOW_MINUTES = 2


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
