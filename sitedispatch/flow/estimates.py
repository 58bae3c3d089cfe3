"""How long waiting work waits: the estimated delay a refusal, `ops get` and `status` report, from measured paces."""

from __future__ import annotations

from dataclasses import dataclass

from sitedispatch.domain.model import Operation, Site, Status, lane_for
from sitedispatch.domain.ports import OperationStore, SiteStore
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import estimated_wait_s, running_group_for
from sitedispatch.flow.pace import Pace


@dataclass(frozen=True)
class DelayEstimate:
    """How long a waiting operation should wait: the larger of two bounds, each measured.

    site: the site's earlier unfinished operations run one at a time, at the site's running average;
    principal: its fairness key's earlier unfinished operations in the same lane (its running ones included) run
    `max_running_per_principal` at a time, at the key's mean over its completions of the last minutes.
    """

    delay_s: float
    bound: str  # "site", "principal" or "dependency" (operations/standing.py): which one decided
    site_ahead: int
    site_operation_s: float
    principal_ahead: int
    principal_operation_s: float


def operation_seconds(sites: SiteStore, site_id: str, default_s: float) -> float:
    return site_operation_s(sites.get(site_id), default_s)


def site_operation_s(site: Site | None, default_s: float) -> float:
    """A site's measured time per operation, or `default_s` until it has one."""
    return site.avg_operation_s if site is not None and site.avg_operation_s else default_s


def principal_operation_s(
    pace: Pace, lane: str, principal: str, tenant: str, now: float, fallback_s: float
) -> tuple[int, float]:
    """(completions in the window, mean operation time) of a fairness key's work in a lane; the fallback until some
    operation of it has completed within the window."""
    reading = pace.reading(lane, principal, now, tenant)
    return reading.completions, reading.mean_s if reading.mean_s is not None else fallback_s


WAITING = (Status.ACCEPTED, Status.QUEUED)
LISTED = 1000  # operations read per status for an estimate (an estimate, not an inventory)


def estimated_delay_for(
    op: Operation, operations: OperationStore, sites: SiteStore, pace: Pace, settings: Settings, now: float
) -> DelayEstimate:
    """For a waiting operation: the larger of the site bound and the principal bound (see DelayEstimate)."""
    site_s = operation_seconds(sites, op.site_id, settings.default_operation_s)
    lane = lane_for(op.kind)
    _, principal_s = principal_operation_s(pace, lane, op.principal, op.tenant_key, now, site_s)
    if op.status.terminal or op.status == Status.RUNNING:
        return DelayEstimate(0.0, "site", 0, site_s, 0, principal_s)
    site_ahead = sum(
        1
        for other in operations.list(site_id=op.site_id, limit=LISTED)
        if other.created_at < op.created_at and not other.status.terminal
    )
    running = sum(
        reading.value for reading in operations.read_counters(running_group_for(settings, op).shard_ids()).values()
    )
    waiting_ahead = sum(
        1
        for status in WAITING
        for other in operations.list(status=status, limit=LISTED)
        if (other.principal, other.tenant_key) == (op.principal, op.tenant_key)
        and lane_for(other.kind) == lane
        and other.created_at < op.created_at
    )
    principal_ahead = running + waiting_ahead
    by_site = estimated_wait_s(site_ahead, site_s)
    by_principal = estimated_wait_s(principal_ahead, principal_s, settings.max_running_per_principal)
    bound = "principal" if by_principal > by_site else "site"
    return DelayEstimate(max(by_site, by_principal), bound, site_ahead, site_s, principal_ahead, principal_s)
