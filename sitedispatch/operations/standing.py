"""Where an operation not yet ended stands: its progress, what it waits on, and when it should start."""

from __future__ import annotations

from dataclasses import dataclass

from sitedispatch.domain.model import Operation, Status
from sitedispatch.domain.ports import OperationStore, SiteStore
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.estimates import DelayEstimate, estimated_delay_for
from sitedispatch.flow.pace import Pace
from sitedispatch.operations.progress import Progress


@dataclass(frozen=True)
class Standing:
    progress: Progress | None = None  # a long operation's, from its last checkpoint
    waiting_because: str | None = None  # "paused: REASON" while its site is paused (then no estimate)
    estimate: DelayEstimate | None = None  # a waiting operation's estimated delay and what decided it


def standing_of(
    op: Operation, operations: OperationStore, sites: SiteStore, pace: Pace, settings: Settings, now: float
) -> Standing:
    if op.status.terminal:
        return Standing()
    progress = Progress.of(op.checkpoint)
    if op.status == Status.RUNNING:
        return Standing(progress)
    site = sites.get(op.site_id)
    if site is not None and site.paused:
        return Standing(progress, waiting_because=f"paused: {site.pause_reason or 'no reason given'}")
    return Standing(progress, estimate=estimated_delay_for(op, operations, sites, pace, settings, now))
