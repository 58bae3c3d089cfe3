"""The counters table's other tenants: operators' quota overrides (QuotaStore) and the per-minute buckets of
`operations/minute_counts.py` (MinuteBuckets). The admission counters themselves move inside the operation store's
transactions (`aws/operations.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pynamodb.expressions.update import Action

from sitedispatch.aws.tables import Models
from sitedispatch.aws.writes import TransactionFailed, get_item, patient, transaction
from sitedispatch.domain.model import Quota
from sitedispatch.operations.admission import quota_key
from sitedispatch.operations.minute_counts import Bucket, expires_at

RECORD = "quota record"


class DynamoQuotaStore:
    """Principals' quota overrides: the record (`quota#PRINCIPAL`, for reading and audit) and the maximum kept on each
    counter it bounds (what the admission and running-slot conditions read), written in one transaction."""

    def __init__(self, models: Models) -> None:
        self.C = models.Counter

    def get(self, principal: str) -> Quota | None:
        item = get_item(self.C, quota_key(principal))
        if item is None:
            return None
        return Quota(
            principal,
            None if item.max_outstanding is None else int(item.max_outstanding),
            None if item.max_running is None else int(item.max_running),
            item.updated_by or "",
            float(item.changed_at or 0.0),
            item.reason,
        )

    def put(self, quota: Quota, bounds: Mapping[str, int | None]) -> None:
        C = self.C
        record = C(
            quota_key(quota.principal),
            max_outstanding=quota.max_outstanding,
            max_running=quota.max_running,
            updated_by=quota.updated_by,
            changed_at=quota.updated_at,
            reason=quota.reason,
            value=0,
        )
        with transaction(C) as tx:
            tx.save(RECORD, record)
            for counter, maximum in bounds.items():
                tx.update(
                    f"bound:{counter}", C(counter), [C.maximum.remove() if maximum is None else C.maximum.set(maximum)]
                )

    def clear(self, principal: str, bounds: Sequence[str]) -> bool:
        C = self.C
        try:
            with transaction(C) as tx:
                tx.delete(RECORD, C(quota_key(principal)), condition=C.counter_id.exists())
                for counter in bounds:
                    tx.update(f"bound:{counter}", C(counter), [C.maximum.remove()])
        except TransactionFailed as failed:
            if RECORD in failed.failed:
                return False
            raise
        return True


def bucket_actions(C: Any, minute: int, count: int, amount: int) -> list[Action]:
    """An add to a minute's bucket (its first creates it): the same whether alone or in a transaction."""
    return [C.value.add(count), C.total.add(amount), C.minute.set(minute), C.expires_at.set(expires_at(minute))]


class DynamoMinuteBuckets:
    """Adding is one unconditional UpdateItem on the minute's own item (ADD; the minute and the expiry set); reading
    a window is one BatchGetItem."""

    def __init__(self, models: Models) -> None:
        self.C = models.Counter

    def add(self, bucket_id: str, minute: int, count: int, amount: int) -> None:
        patient(lambda: self.C(bucket_id).update(actions=bucket_actions(self.C, minute, count, amount)))

    def read(self, bucket_ids: Sequence[str]) -> dict[str, Bucket]:
        wanted = list(dict.fromkeys(bucket_ids))
        return {
            item.counter_id: Bucket(int(item.minute), int(item.value or 0), int(item.total or 0))
            for item in (self.C.batch_get(wanted) if wanted else [])
            if item.minute is not None
        }
