"""The audit table: one item per action, partitioned by day, newest first (AuditLog)."""

from __future__ import annotations

import time
import uuid

from sitedispatch.aws.tables import Models
from sitedispatch.domain.model import AuditEntry

DAY_S = 86_400


def audit_day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


class DynamoAuditLog:
    def __init__(self, models: Models) -> None:
        self.M = models.Audit

    def record(self, entry: AuditEntry) -> None:
        self.M(
            audit_day(entry.at),
            f"{entry.at:017.6f}#{uuid.uuid4().hex[:8]}",
            at=entry.at,
            actor=entry.actor,
            action=entry.action,
            target=entry.target,
            site_id=entry.site_id,
            reason=entry.reason,
            outcome=entry.outcome,
            detail=entry.detail or None,
        ).save()

    def list(
        self,
        since: float,
        until: float,
        *,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        site_id: str | None = None,
        limit: int = 100,
    ) -> list[AuditEntry]:
        M = self.M
        out: list[AuditEntry] = []
        day = until
        while day >= since - DAY_S and len(out) < limit:  # newest day first, each day newest first
            for item in M.query(
                audit_day(day), M.entry_id.between(f"{since:017.6f}", f"{until:017.6f}~"), scan_index_forward=False
            ):
                entry = AuditEntry(
                    at=float(item.at),
                    actor=item.actor,
                    action=item.action,
                    target=item.target,
                    outcome=item.outcome,
                    reason=item.reason,
                    site_id=item.site_id,
                    detail=item.detail or {},
                )
                if _matches(entry, actor=actor, action=action, target=target, site_id=site_id):
                    out.append(entry)
                    if len(out) >= limit:
                        break
            day -= DAY_S
        return out


def _matches(entry: AuditEntry, **wanted: str | None) -> bool:
    return all(value is None or getattr(entry, name) == value for name, value in wanted.items())
