"""`sitedispatch status`: queue depth, in-flight, oldest age and DLQ depth per queue, and the operation backlog."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import Status
from .ports import OperationStore
from .resources import QUEUES


@dataclass(frozen=True)
class QueueStatus:
    queue: str
    visible: int
    in_flight: int
    dlq_depth: int
    oldest_age_s: float | None


@dataclass(frozen=True)
class StatusReport:
    queues: list[QueueStatus]
    backlog_by_status: dict[str, int]
    backlog_by_principal: dict[str, int] = field(default_factory=dict)


def _count(attributes: dict[str, str], name: str) -> int:
    return int(attributes.get(name, "0"))


def collect_status(sqs: Any, settings: Any, operations: OperationStore, now: float) -> StatusReport:
    """One GetQueueAttributes per queue and DLQ, plus the operation index by status.

    SQS exposes no oldest-message age through its API (only through CloudWatch), so the operations queue's oldest
    age is the oldest waiting operation's queue time, read from the operations table.
    """
    waiting = [op for status in (Status.ACCEPTED, Status.QUEUED, Status.RUNNING)
               for op in operations.list(status=status, limit=10_000)]
    backlog_by_status = {status.value: sum(op.status == status for op in waiting)
                         for status in (Status.ACCEPTED, Status.QUEUED, Status.RUNNING)}
    by_principal: dict[str, int] = {}
    for op in waiting:
        by_principal[op.principal] = by_principal.get(op.principal, 0) + 1
    oldest = min((op.queued_at or op.created_at for op in waiting if op.status != Status.RUNNING), default=None)
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    queues = []
    for role, spec in QUEUES.items():
        attrs = sqs.get_queue_attributes(QueueUrl=getattr(settings, spec.url_field), AttributeNames=names)["Attributes"]
        dlq = sqs.get_queue_attributes(QueueUrl=getattr(settings, spec.dlq_url_field),
                                       AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
        age = (now - oldest) if (role == "operations" and oldest is not None) else None
        queues.append(QueueStatus(role, _count(attrs, names[0]), _count(attrs, names[1]),
                                  _count(dlq, "ApproximateNumberOfMessages"), age))
    return StatusReport(queues, backlog_by_status, by_principal)
