"""Where an operation not yet ended stands: its progress, what it waits on, and when it should start."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sitedispatch.domain.model import Operation, Site, Status
from sitedispatch.domain.ports import DependencyStore, OperationStore, SiteStore
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.dependencies import Probe, Reserve, Wait, decide
from sitedispatch.flow.estimates import DelayEstimate, estimated_delay_for, site_operation_s
from sitedispatch.flow.pace import Pace
from sitedispatch.operations.progress import Progress


@dataclass(frozen=True)
class Standing:
    progress: Progress | None = None  # a long operation's, from its last checkpoint
    # "paused: REASON" while its site is paused (then no estimate); what of its site's dependencies holds it
    waiting_because: str | None = None
    estimate: DelayEstimate | None = None  # a waiting operation's estimated delay and what decided it


def standing_of(
    op: Operation,
    operations: OperationStore,
    sites: SiteStore,
    pace: Pace,
    settings: Settings,
    now: float,
    dependencies: DependencyStore | None = None,
) -> Standing:
    if op.status.terminal:
        return Standing()
    progress = Progress.of(op.checkpoint)
    if op.status == Status.RUNNING:
        return Standing(progress)
    site = sites.get(op.site_id)
    if site is not None and site.paused:
        return Standing(progress, waiting_because=f"paused: {site.pause_reason or 'no reason given'}")
    estimate = estimated_delay_for(op, operations, sites, pace, settings, now)
    held = _held_by_dependencies(op, site, dependencies, settings, now) if site is not None else None
    if held is None:
        return Standing(progress, estimate=estimate)
    why, wait_s = held
    if wait_s is None:  # paused by an operator: no estimate, as a paused site has none
        return Standing(progress, waiting_because=why)
    if wait_s > estimate.delay_s:
        estimate = replace(estimate, delay_s=wait_s, bound="dependency")
    return Standing(progress, waiting_because=why, estimate=estimate)


def _held_by_dependencies(
    op: Operation, site: Site, dependencies: DependencyStore | None, settings: Settings, now: float
) -> tuple[str, float | None] | None:
    """What of its site's dependencies holds the operation back now, and for about how long (None: until an
    operator resumes one), as its next delivery would decide it; None if nothing does."""
    if op.rate_reserved and op.not_before is not None and op.not_before > now:  # a dependency's or its key's
        return f"rate: its start is reserved, in {op.not_before - now:.0f} s", op.not_before - now
    if not site.dependencies or dependencies is None:
        return None
    operation_s = site_operation_s(site, settings.default_operation_s)
    decision = decide(
        op,
        site.dependencies,
        dependencies.read(site.dependencies, op.kind),
        now,
        cap_wait_s=operation_s,
        paused_wait_s=settings.pause_deferral_s,
        probe_timeout_s=settings.dependency_probe_timeout_s,
    )
    if isinstance(decision, Wait):
        return decision.why, None if decision.reason == "dependency_paused" else decision.seconds
    if isinstance(decision, Reserve):
        return decision.why, decision.at - now
    if isinstance(decision, Probe):
        return f"dependency {decision.dependency_id} open: its probe may start now", 0.0
    return None
