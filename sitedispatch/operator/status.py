"""`sitedispatch status`: queue depth, in-flight, oldest age and DLQ depth per queue, and the operation backlog."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.domain.model import Kind, Status, lane_for
from sitedispatch.domain.ports import CounterReading, OperationStore, SiteStore
from sitedispatch.domain.resources import QUEUES, operation_lanes
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import estimated_wait_s
from sitedispatch.flow.counters import PRINCIPAL, RUNNING, SHARE, SITE, named_by
from sitedispatch.flow.pace import Pace


@dataclass(frozen=True)
class QueueStatus:
    queue: str
    visible: int
    in_flight: int
    dlq_depth: int
    oldest_age_s: float | None
    dlq_oldest_age_s: float | None = None


@dataclass(frozen=True)
class SiteDelay:
    site_id: str
    backlog: int
    operation_s: float  # the site's measured average operation time (or the default before one is measured)
    estimated_delay_s: float | None  # for work submitted now: the backlog, one at a time (None while paused)
    paused: str | None = None  # "paused: REASON": nothing runs until it is resumed, so no estimate is given


@dataclass(frozen=True)
class PrincipalDelay:
    principal: str
    lane: str
    backlog: int  # unfinished operations of the fairness key in the lane (running ones included)
    completed_recently: int  # in the pace window (5 minutes)
    operation_s: float  # their measured mean (or the default before any completed in the window)
    estimated_delay_s: float  # for work submitted now: the backlog, `max_running_per_principal` at a time
    tenant: str = ""  # the fairness key, when not the principal itself


@dataclass(frozen=True)
class StatusReport:
    queues: list[QueueStatus]
    backlog_by_status: dict[str, int]
    backlog_by_principal: dict[str, int] = field(default_factory=dict)
    delay_by_site: list[SiteDelay] = field(default_factory=list)
    delay_by_principal: list[PrincipalDelay] = field(default_factory=list)
    dependencies: list[DependencyRow] = field(default_factory=list)  # those the caller's sites name (operators: all)


@dataclass(frozen=True)
class DependencyRow:
    """A dependency's line in the status report: its breaker, what runs on it, and its rates."""

    dependency_id: str
    state: str
    running: int
    max_running: int | None
    rates: list[str]  # each described, with its next start when not now
    reason: str | None = None


SITES_SHOWN = 20
SUMMED = frozenset({SITE, PRINCIPAL, RUNNING, SHARE})  # the counters the report sums (global and tenant: not needed)
OLDEST_READS = 500  # rows of a status read from its oldest to find a lane's oldest operation


@dataclass
class FlowCounts:
    """What the flow counters hold (flow/counters.py), their shards summed: the backlog without reading one
    operation. Each unfinished operation holds one place of its principal's (and tenant's) outstanding count and
    of its site's; in its lane, a place of its fairness key's share while it is in the queue or running (a
    `waiting` count on the share while it waits for one), and a running slot while it runs."""

    outstanding: Counter[str] = field(default_factory=Counter)  # principal -> its unfinished operations
    sites: Counter[str] = field(default_factory=Counter)  # site -> its unfinished operations
    placed: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (lane, principal, tenant) -> in its queue
    waiting: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # ... -> waiting for its share
    running: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # ... -> running

    @classmethod
    def read(cls, readings: dict[str, CounterReading], principal: str | None = None) -> FlowCounts:
        """The counts of the counters read, a principal's only when one is given."""
        counts = cls()
        for counter_id, reading in readings.items():
            named = named_by(counter_id)
            if named is None or named[0] not in SUMMED:
                continue  # the global and tenant counts: the principal's and the shares' say it per key
            name, parts = named
            if name == SITE:
                if principal is None or reading.owner == principal:
                    counts.sites[parts[0]] += reading.value
            elif principal is not None and parts[-2 if name in (RUNNING, SHARE) else 0] != principal:
                continue
            elif name == PRINCIPAL:
                counts.outstanding[parts[0]] += reading.value
            elif name in (RUNNING, SHARE):
                lane, owner, tenant = parts
                (counts.running if name == RUNNING else counts.placed)[lane, owner, tenant] += reading.value
                counts.waiting[lane, owner, tenant] += reading.waiting
        return counts

    def in_lane(self, counts: Counter[tuple[str, str, str]], lane: str) -> int:
        return sum(value for (at, _, _), value in counts.items() if at == lane)

    def by_status(self) -> dict[str, int]:
        running = sum(self.running.values())
        return {
            Status.ACCEPTED.value: sum(self.waiting.values()),
            Status.QUEUED.value: max(sum(self.placed.values()) - running, 0),
            Status.RUNNING.value: running,
        }

    def backlog(self) -> Counter[tuple[str, str, str]]:
        """Unfinished operations per lane and fairness key (running ones included)."""
        return +(self.placed + self.waiting)


def collect_status(
    sqs: Any,
    settings: Settings,
    operations: OperationStore,
    sites: SiteStore,
    pace: Pace,
    now: float,
    principal: str | None = None,
    sites_shown: bool = True,
) -> StatusReport:
    """One GetQueueAttributes per queue and DLQ, the flow counters (the by-held index and one BatchGetItem per 100
    counters; a site's only with `sites_shown`, the busiest sites then read in one BatchGetItem), and the oldest
    waiting and oldest dead operation of each lane holding some (an ascending read of each status, stopped when
    each lane has its oldest). No unfinished operation is read, so the report costs the same with 10 or 100,000 of
    them (it grows with the principals, tenants and, with `sites_shown`, sites that have work). Given a
    `principal`, the rows that name principals and sites are that principal's only (the queue rows are the
    deployment's: counts and ages that name no tenant).

    SQS exposes no oldest-message age through its API (only through CloudWatch), so each operations lane's oldest
    age is how long its oldest waiting operation has been waiting (since it was accepted, or last queued) and each
    DLQ's, while it holds messages, is its oldest dead operation's, read from the operations table; the
    publications queue has no per-message record, so its age is left to CloudWatch.
    """
    # the counters the report sums (a site's only when the busiest sites are asked for: one per site with work)
    summed = SUMMED if sites_shown else SUMMED - {SITE}
    readings = operations.read_counters(
        [counter for counter in operations.held_counter_ids() if (named_by(counter) or ("",))[0] in summed]
    )
    fleet = FlowCounts.read(readings)
    shown = fleet if principal is None else FlowCounts.read(readings, principal)
    return StatusReport(
        _queue_rows(sqs, settings, operations, fleet, now),
        shown.by_status(),
        dict(sorted((+shown.outstanding).items())),
        _site_delays(shown, sites, settings),
        _principal_delays(shown, pace, settings, now),
    )


def _lane_kinds(lanes: Iterable[str]) -> dict[str, set[Kind]]:
    return {lane: {kind for kind in Kind if lane_for(kind) == lane} for lane in lanes}


def _oldest_ages(operations: OperationStore, statuses: dict[Status, list[str]], now: float) -> dict[str, float]:
    """Per lane, how long its oldest operation has been in one of the statuses (each status read once, for the
    lanes listed with it: those whose counts say it holds some)."""
    ages: dict[str, float] = {}
    for status, lanes in statuses.items():
        for lane, op in operations.oldest(status, _lane_kinds(lanes), OLDEST_READS).items() if lanes else ():
            ages[lane] = max(ages.get(lane, 0.0), now - (op.finished_at or op.updated_at))
    return ages


def _queue_rows(
    sqs: Any, settings: Settings, operations: OperationStore, fleet: FlowCounts, now: float
) -> list[QueueStatus]:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    depths = {}
    for role, spec in QUEUES.items():
        attrs = sqs.get_queue_attributes(QueueUrl=getattr(settings, spec.url_field), AttributeNames=names)["Attributes"]
        dlq = sqs.get_queue_attributes(
            QueueUrl=getattr(settings, spec.dlq_url_field), AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        depths[role] = (_count(attrs, names[0]), _count(attrs, names[1]), _count(dlq, names[0]))
    lanes = operation_lanes()
    waiting = _oldest_ages(
        operations,
        {
            Status.QUEUED: [
                lane for lane in lanes if fleet.in_lane(fleet.placed, lane) > fleet.in_lane(fleet.running, lane)
            ],
            Status.ACCEPTED: [lane for lane in lanes if fleet.in_lane(fleet.waiting, lane) > 0],
        },
        now,
    )
    dead = _oldest_ages(operations, {Status.DEAD: [lane for lane in lanes if depths[lane][2] > 0]}, now)
    return [
        QueueStatus(role, visible, in_flight, dlq_depth, waiting.get(role), dead.get(role))
        for role, (visible, in_flight, dlq_depth) in depths.items()
    ]


def _count(attributes: dict[str, str], name: str) -> int:
    return int(attributes.get(name, "0"))


def _busiest(counts: Counter[Any]) -> list[tuple[Any, int]]:
    return sorted((+counts).items(), key=lambda item: (-item[1], item[0]))[:SITES_SHOWN]


def _site_delays(counts: FlowCounts, sites: SiteStore, settings: Settings) -> list[SiteDelay]:
    delays = []
    busiest = _busiest(counts.sites)
    known = sites.get_many([site_id for site_id, _ in busiest])  # their measured pace and whether they are paused
    for site_id, backlog in busiest:
        site = known.get(site_id)
        site_s = site.avg_operation_s if site is not None and site.avg_operation_s else settings.default_operation_s
        if site is not None and site.paused:
            reason = f"paused: {site.pause_reason or 'no reason given'}"
            delays.append(SiteDelay(site_id, backlog, round(site_s, 2), None, reason))
        else:
            delays.append(SiteDelay(site_id, backlog, round(site_s, 2), estimated_wait_s(backlog, site_s)))
    return delays


def _principal_delays(counts: FlowCounts, pace: Pace, settings: Settings, now: float) -> list[PrincipalDelay]:
    busiest = _busiest(counts.backlog())
    readings = pace.readings([key for key, _ in busiest], now)  # together: one round trip per five keys
    delays = []
    for (lane, principal, tenant), backlog in busiest:
        reading = readings[lane, principal, tenant]
        pace_s = reading.mean_s if reading.mean_s is not None else settings.default_operation_s
        delays.append(
            PrincipalDelay(
                principal,
                lane,
                backlog,
                reading.completions,
                round(pace_s, 2),
                estimated_wait_s(backlog, pace_s, settings.max_running_per_principal),
                "" if tenant == principal else tenant,
            )
        )
    return delays
