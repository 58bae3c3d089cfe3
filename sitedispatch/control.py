"""Operator and producer controls on accepted work: cancel an operation, pause and resume a site."""

from __future__ import annotations

from .admission import counters_for
from .errors import Conflict, NotFound, NotRunnable
from .model import Operation, Site, Status
from .ports import Clock, OperationStore, SiteStore


def cancel(operations: OperationStore, clock: Clock, operation_id: str, reason: str) -> Operation:
    """A queued operation is cancelled at once; a running one is asked to stop and ends `cancelled` without
    committing (its commit transaction is refused from now on). A terminal one is a Conflict."""
    op = operations.get(operation_id)
    if op is None:
        raise NotFound(f"operation {operation_id} not found")
    if op.status in {Status.ACCEPTED, Status.QUEUED}:
        try:
            operations.end(operation_id, Status.CANCELLED, clock.now(), counters_for(op),
                           from_statuses=(Status.ACCEPTED, Status.QUEUED), reason=reason or "cancelled",
                           slot=op.running_slot)
        except NotRunnable:
            pass  # it started meanwhile: fall through to the cooperative cancel
        else:
            return _reload(operations, operation_id)
    try:
        operations.request_cancel(operation_id, reason or "cancelled", clock.now())
    except NotRunnable:
        current = _reload(operations, operation_id)
        raise Conflict(f"operation {operation_id} is already {current.status.value}") from None
    return _reload(operations, operation_id)


def set_paused(sites: SiteStore, site_id: str, paused: bool, reason: str | None) -> Site:
    return sites.set_paused(site_id, paused, reason if paused else None)


def _reload(operations: OperationStore, operation_id: str) -> Operation:
    op = operations.get(operation_id)
    assert op is not None
    return op
