"""How the fleet fares, per minute of the last hour: attempts and retries (the retry budget's counts), operations
succeeded and gone dead (each a write of its own once the commit, or the dead transition, is done: in the commit's
transaction, the fleet-wide items would make concurrent commits conflict). What the console's overview
draws, read in a few BatchGetItems whatever the number of operations. Statistics, not state (minute_counts.py)."""

from __future__ import annotations

from dataclasses import dataclass

from sitedispatch.flow.minute_counts import KEEP_MINUTES, MinuteCounts
from sitedispatch.flow.retry_budget import RetryBudget

SUCCEEDED = "ended.succeeded"
DEAD = "ended.dead"


@dataclass(frozen=True)
class MinuteOutcomes:
    minute: int  # epoch seconds of the minute's start
    attempts: int
    retries: int
    succeeded: int
    dead: int


class Outcomes:
    def __init__(self, counts: MinuteCounts) -> None:
        self.counts = counts

    def succeeded(self, now: float) -> None:
        self.counts.add(SUCCEEDED, now)

    def dead(self, now: float) -> None:
        self.counts.add(DEAD, now)

    def last(self, now: float, minutes: int = KEEP_MINUTES) -> list[MinuteOutcomes]:
        """The last `minutes` minutes, oldest first, the current one included."""
        series = self.counts.series((RetryBudget.NAME, SUCCEEDED, DEAD), now, minutes)
        attempts, succeeded, dead = (series[name] for name in (RetryBudget.NAME, SUCCEEDED, DEAD))
        return [
            MinuteOutcomes(minute * 60, attempts[minute][0], attempts[minute][1], succeeded[minute][0], dead[minute][0])
            for minute in sorted(attempts)
        ]
