"""An operation's row in the operations table, read and written: the item to the domain's Operation, and what a
row records of its place in a share."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from sitedispatch.aws.flow import GUARD, SHARE
from sitedispatch.aws.tables import UNSENT, OperationItem
from sitedispatch.aws.writes import get_item
from sitedispatch.domain.errors import ShareMoved
from sitedispatch.domain.model import RUNNABLE, ErrorInfo, Kind, Operation, Status
from sitedispatch.domain.ports import Placement

RUNNABLE_VALUES = tuple(s.value for s in RUNNABLE)
ROW = "operation"  # the operation row's name in a transaction (counters are named `counter:ID`)
LEASE = "lease"  # the site's lease, claimed in the transaction that starts the attempt
SITE = "site"  # the site's registration, in the transaction of its first submit


def unsent_record(group: str) -> str:
    """The counters table's record of a batch group not yet known sent (create_group, sent, unsent)."""
    return f"{UNSENT}#{group}"


def error_dict(error: ErrorInfo) -> dict[str, Any]:
    return {
        "error_class": error.error_class,
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable,
    }


def to_operation(item: OperationItem) -> Operation:
    error = item.error
    return Operation(
        operation_id=item.operation_id,
        site_id=item.site_id,
        principal=item.principal,
        kind=Kind(item.kind),
        status=Status(item.status),
        input_key=item.input_key,
        input_digest=item.input_digest,
        idempotency_key=item.idempotency_key,
        created_at=float(item.created_at),
        updated_at=float(item.updated_at),
        attempt=int(item.attempt or 0),
        attempt_budget=int(item.attempt_budget or 0),
        epoch=int(item.epoch or 0),
        fence=None if item.fence is None else int(item.fence),
        queued_at=item.queued_at,
        started_at=item.started_at,
        finished_at=item.finished_at,
        not_before=item.not_before,
        error=ErrorInfo(error["error_class"], error["code"], error["message"], error["retryable"]) if error else None,
        result=item.result or {},
        cancel_requested=item.cancel_requested,
        superseded_by=item.superseded_by,
        running_slot=item.running_slot,
        evidence=item.evidence,
        inline_input=item.inline_input,
        waiting_for=item.waiting_for,
        waiting_at=item.waiting_at,
        checkpoint=item.checkpoint,
        continuing=bool(item.continuing),
        tenant=item.tenant or "",
        holds=tuple(cast(list[str], item.holds or [])),
        share=item.share,
        dependency_slots=tuple(cast(list[str], item.dependency_slots or [])),
        rate_reserved={str(k): float(v) for k, v in (item.rate_reserved or {}).items()},
    )


class Placed(NamedTuple):
    """What a row records of its placement in a share: the place it took, or the share it waits for and where."""

    share: str | None = None
    waiting_for: str | None = None
    waiting_at: str | None = None


def placement_of(share: Placement | None) -> Placed:
    if share is None:
        return Placed()
    if share.waits:
        return Placed(None, share.group, share.slot.counter)
    return Placed(share.slot.counter)


def same_or_absent(attribute: Any, value: str | None) -> Any:
    """The row's attribute is `value` (absent when None)."""
    return attribute.does_not_exist() if value is None else attribute == value


def read_operation(rows: type[OperationItem], operation_id: str) -> Operation | None:
    item = get_item(rows, operation_id)
    return None if item is None else to_operation(item)


def share_refusals(share: Placement | None) -> list[tuple[str, Any]]:
    """What a share's failed condition in a transaction means: its place moved (another took it, or one waits)."""
    if share is None:
        return []
    return [(name, lambda: ShareMoved(share.slot.counter)) for name in (SHARE, GUARD)]
