"""`sitedispatch status`: queue depth, in-flight, oldest age and DLQ depth per queue, and the operation backlog."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.domain.model import Operation, Status, lane_for
from sitedispatch.domain.ports import OperationStore, SiteStore
from sitedispatch.domain.resources import QUEUES
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import estimated_wait_s
from sitedispatch.flow.estimates import principal_operation_s
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


SITES_SHOWN = 20


def _oldest_by_lane(stamped: Iterable[tuple[float, Operation]]) -> dict[str, float]:
    oldest: dict[str, float] = {}
    for at, op in stamped:
        lane = lane_for(op.kind)
        oldest[lane] = min(at, oldest.get(lane, at))
    return oldest


def _count(attributes: dict[str, str], name: str) -> int:
    return int(attributes.get(name, "0"))


def collect_status(
    sqs: Any,
    settings: Settings,
    operations: OperationStore,
    sites: SiteStore,
    pace: Pace,
    now: float,
    principal: str | None = None,
) -> StatusReport:
    """One GetQueueAttributes per queue and DLQ, plus the operation index by status. Given a `principal`, the rows
    that name principals and sites are that principal's only (the queue rows are the deployment's: counts and ages
    that name no tenant).

    SQS exposes no oldest-message age through its API (only through CloudWatch), so each operations lane's oldest
    age is its oldest waiting operation's queue time and each DLQ's is its oldest dead operation's, read from the
    operations table; the publications queue has no per-message record, so its age is left to CloudWatch.
    """
    waiting = [
        op
        for status in (Status.ACCEPTED, Status.QUEUED, Status.RUNNING)
        for op in operations.list(status=status, limit=10_000)
    ]
    dead = operations.list(status=Status.DEAD, limit=10_000)
    queues = _queue_rows(sqs, settings, waiting, dead, now)
    shown = waiting if principal is None else [op for op in waiting if op.principal == principal]
    backlog_by_status = {
        status.value: sum(op.status == status for op in shown)
        for status in (Status.ACCEPTED, Status.QUEUED, Status.RUNNING)
    }
    by_principal = Counter(op.principal for op in shown)
    return StatusReport(
        queues,
        backlog_by_status,
        dict(sorted(by_principal.items())),
        _site_delays(shown, sites, settings),
        _principal_delays(shown, pace, settings, now),
    )


def _queue_rows(
    sqs: Any, settings: Settings, waiting: list[Operation], dead: list[Operation], now: float
) -> list[QueueStatus]:
    oldest_waiting = _oldest_by_lane(
        (op.queued_at or op.created_at, op) for op in waiting if op.status != Status.RUNNING
    )
    oldest_dead = _oldest_by_lane((op.finished_at or op.updated_at, op) for op in dead)
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    queues = []
    for role, spec in QUEUES.items():
        attrs = sqs.get_queue_attributes(QueueUrl=getattr(settings, spec.url_field), AttributeNames=names)["Attributes"]
        dlq = sqs.get_queue_attributes(
            QueueUrl=getattr(settings, spec.dlq_url_field), AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        queues.append(
            QueueStatus(
                role,
                _count(attrs, names[0]),
                _count(attrs, names[1]),
                _count(dlq, "ApproximateNumberOfMessages"),
                (now - oldest_waiting[role]) if role in oldest_waiting else None,
                (now - oldest_dead[role]) if role in oldest_dead else None,
            )
        )
    return queues


def _busiest(counts: Counter[Any]) -> list[tuple[Any, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:SITES_SHOWN]


def _site_delays(waiting: list[Operation], sites: SiteStore, settings: Settings) -> list[SiteDelay]:
    delays = []
    for site_id, backlog in _busiest(Counter(op.site_id for op in waiting)):
        site = sites.get(site_id)  # one read: its measured pace and whether it is paused
        site_s = site.avg_operation_s if site is not None and site.avg_operation_s else settings.default_operation_s
        if site is not None and site.paused:
            reason = f"paused: {site.pause_reason or 'no reason given'}"
            delays.append(SiteDelay(site_id, backlog, round(site_s, 2), None, reason))
        else:
            delays.append(SiteDelay(site_id, backlog, round(site_s, 2), estimated_wait_s(backlog, site_s)))
    return delays


def _principal_delays(waiting: list[Operation], pace: Pace, settings: Settings, now: float) -> list[PrincipalDelay]:
    delays = []
    keys = Counter((op.principal, op.tenant_key, lane_for(op.kind)) for op in waiting)
    for (principal, tenant, lane), backlog in _busiest(keys):
        completed, pace_s = principal_operation_s(pace, lane, principal, tenant, now, settings.default_operation_s)
        delays.append(
            PrincipalDelay(
                principal,
                lane,
                backlog,
                completed,
                round(pace_s, 2),
                estimated_wait_s(backlog, pace_s, settings.max_running_per_principal),
                "" if tenant == principal else tenant,
            )
        )
    return delays
