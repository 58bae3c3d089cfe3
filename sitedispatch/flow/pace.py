"""Each fairness key's measured pace per lane: completions and their busy time over the last five minutes (the
estimated delays read it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sitedispatch.domain.ports import Tally
from sitedispatch.flow.minute_counts import MinuteCounts

PACE_WINDOW_MINUTES = 5


@dataclass(frozen=True)
class PaceReading:
    completions: int  # in the window
    mean_s: float | None  # their mean operation time (None: nothing completed in the window)


class Pace:
    """A fairness key's (a principal's, or a tenant's it names) measured pace in one lane: how many of its
    operations completed in the last few minutes, and their mean time from attempt start to commit."""

    def __init__(self, counts: MinuteCounts, window_minutes: int = PACE_WINDOW_MINUTES) -> None:
        self.counts = counts
        self.window_minutes = window_minutes

    @staticmethod
    def name(lane: str, principal: str, tenant: str | None = None) -> str:
        own = tenant is None or tenant == principal
        return f"completed#{lane}#{principal}" if own else f"completed#{lane}#{principal}#{tenant}"

    def record(self, lane: str, principal: str, seconds: float, now: float, tenant: str | None = None) -> None:
        self.counts.add(self.name(lane, principal, tenant), now, 1, max(0, round(seconds * 1000)))

    def tally(self, lane: str, principal: str, tenant: str, seconds: float, now: float) -> Tally:
        """One completion of `seconds`, as the add the commit transaction makes (counted exactly when the operation
        is: no request of its own, and no completion lost to a crash between the commit and its count)."""
        return self.counts.tally(self.name(lane, principal, tenant), now, 1, max(0, round(seconds * 1000)))

    def reading(self, lane: str, principal: str, now: float, tenant: str | None = None) -> PaceReading:
        return self.readings([(lane, principal, tenant or principal)], now)[lane, principal, tenant or principal]

    def readings(self, keys: Sequence[tuple[str, str, str]], now: float) -> dict[tuple[str, str, str], PaceReading]:
        """The readings of several (lane, principal, tenant) at once: their buckets read together, as many a round
        trip as fit (the fleet's status reads every fairness key it shows)."""
        names = {key: self.name(*key) for key in keys}
        series = self.counts.series(list(dict.fromkeys(names.values())), now, self.window_minutes) if keys else {}
        readings = {}
        for key, name in names.items():
            count = sum(c for c, _ in series[name].values())
            busy_ms = sum(amount for _, amount in series[name].values())
            readings[key] = PaceReading(count, round(busy_ms / 1000 / count, 3) if count else None)
        return readings
