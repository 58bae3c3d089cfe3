"""Flow control in DynamoDB: the counters' moves inside the operation store's transactions (FlowCounters), operators'
quota overrides (QuotaStore) and the per-minute buckets of `flow/minute_counts.py` (MinuteBuckets), all in the
counters table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pynamodb.expressions.update import Action

from sitedispatch.aws.tables import HELD, CounterItem, Models, index_shard, index_shards
from sitedispatch.aws.writes import (
    NamedTransaction,
    TransactionFailed,
    conditionally,
    get_item,
    read_all,
    single_write,
    transaction,
    under_limit,
)
from sitedispatch.domain.dependencies import KeyRates
from sitedispatch.domain.errors import LabelMoved, LimitReached, UnclaimedSite
from sitedispatch.domain.model import Quota
from sitedispatch.domain.ports import CounterReading, Move, Placement, SiteOwner, Slot, foreign_site
from sitedispatch.flow.counters import SEPARATOR, quota_key
from sitedispatch.flow.dependencies import key_rates_key
from sitedispatch.flow.minute_counts import Bucket, expires_at

RECORD = "quota record"
SHARE = "share"  # the share shard's name in a transaction
GUARD = "share guard"  # the home shard a place elsewhere requires nothing waiting on


def counter_item(counter_id: str) -> str:
    """A counter's name in a transaction."""
    return f"counter:{counter_id}"


class FlowCounters:
    """The counters' side of the operation store's transactions: admission under limits, a place of a share or a
    wait for it, releases; and what a recount reads and repairs."""

    def __init__(self, models: Models) -> None:
        self.C = models.Counter

    def moved_up(self, counter_id: str, now: float) -> list[Action]:
        """One more on a counter; it is in the by-held index (what the recount reads) until found zero and quiet."""
        C = self.C
        return [C.value.add(1), C.changed_at.set(now), C.held.set(index_shard(HELD, counter_id))]

    def admit(
        self, tx: NamedTransaction, limits: Sequence[Slot], now: float, owner: SiteOwner | None, principal: str
    ) -> None:
        """One place of each limit's shard while under its maximum; the site's owner checked on its counter."""
        C = self.C
        for slot in limits:
            actions = self.moved_up(slot.counter, now)
            condition = under_limit(C, slot.maximum)
            if owner is not None and slot.counter == owner.counter:
                if owner.claim:
                    actions.append(C.owner.set(C.owner | principal))  # if_not_exists: the first claim stays
                    condition &= C.owner.does_not_exist() | (C.owner == principal)
                else:
                    condition &= C.owner == principal
                condition &= labelled(C, owner.label)
            tx.update(counter_item(slot.counter), C(slot.counter), actions, condition=condition)

    def refusals(self, limits: Sequence[Slot], owner: SiteOwner | None, principal: str) -> list[tuple[str, Any]]:
        """What each limit's failed condition means: a full shard, or a site not the caller's."""

        def refusal(slot: Slot) -> Exception:
            if owner is not None and slot.counter == owner.counter:
                item = get_item(self.C, slot.counter)
                named = item.owner if item is not None else None
                if named is None and not owner.claim:
                    return UnclaimedSite(slot.counter)
                if named is not None and named != principal:
                    return foreign_site(slot.counter.split("#", 1)[1])
                label = (item.label if item is not None else None) or ""
                if label != owner.label:
                    return LabelMoved(slot.counter.split("#", 1)[1], label)
            return self.limit_reached(slot.counter, slot.maximum)

        return [(counter_item(slot.counter), lambda s=slot: refusal(s)) for slot in limits]

    def place(self, tx: NamedTransaction, placement: Placement, now: float) -> None:
        """A place of the shard while it has room and nothing waits on it (and nothing on the guard); or one more
        waiting counted on it, while it has no room or others wait."""
        C = self.C
        nothing_waits = C.waiting.does_not_exist() | (C.waiting == 0)
        room = under_limit(C, placement.slot.maximum) & nothing_waits
        counter = placement.slot.counter
        if placement.waits:
            actions = [C.waiting.add(1), C.changed_at.set(now), C.held.set(index_shard(HELD, counter))]
            tx.update(SHARE, C(counter), actions, condition=~room)
            return
        tx.update(SHARE, C(counter), self.moved_up(counter, now), condition=room)
        if placement.guard is not None:
            tx.check(GUARD, C, placement.guard, nothing_waits)

    def release(self, tx: NamedTransaction, counters: Sequence[str], waiting_at: str | None, now: float) -> None:
        """One place of each counter given back, and a wait counted on `waiting_at` ended."""
        tx.decrement(self.C, counters, now)
        if waiting_at is not None:
            tx.update(SHARE, self.C(waiting_at), [self.C.waiting.add(-1), self.C.changed_at.set(now)])

    def take_released(self, tx: NamedTransaction, into: Slot, waited_at: str | None, now: float) -> None:
        """A place of `into` for an operation that waited counted on `waited_at`, while `into` has room."""
        C = self.C
        actions = self.moved_up(into.counter, now)
        if waited_at == into.counter:
            tx.update(SHARE, C(into.counter), [*actions, C.waiting.add(-1)], condition=under_limit(C, into.maximum))
            return
        tx.update(SHARE, C(into.counter), actions, condition=under_limit(C, into.maximum))
        if waited_at is not None:
            tx.update(GUARD, C(waited_at), [C.waiting.add(-1), C.changed_at.set(now)])

    def move(self, tx: NamedTransaction, move: Move, principal: str, now: float) -> None:
        """`move.count` places of a counter at once, while it stays at or under the move's maximum and has none of
        its own (an operator's quota is honoured one by one)."""
        C = self.C
        fits = C.value.does_not_exist() | (C.value <= move.maximum - move.count)
        condition = C.maximum.does_not_exist() & fits
        actions = [C.value.add(move.count), C.changed_at.set(now), C.held.set(index_shard(HELD, move.counter))]
        if move.register:
            condition &= C.owner.does_not_exist()
            actions.append(C.owner.set(principal))
        elif move.owner:
            condition &= C.owner == principal
        if move.owner or move.register:
            condition &= labelled(C, move.label)
        if move.share:
            condition &= C.waiting.does_not_exist() | (C.waiting == 0)
        tx.update(counter_item(move.counter), C(move.counter), actions, condition=condition)

    def limit_reached(self, counter_id: str, default: int) -> LimitReached:
        item = get_item(self.C, counter_id)
        if item is None:
            return LimitReached(counter_id, 0, default)
        return LimitReached(counter_id, int(item.value or 0), default if item.maximum is None else int(item.maximum))

    def counter(self, counter_id: str) -> int:
        item = get_item(self.C, counter_id)
        return 0 if item is None else int(item.value or 0)

    def read(self, counter_ids: Sequence[str]) -> dict[str, CounterReading]:
        return {
            item.counter_id: CounterReading(
                int(item.value or 0),
                None if item.maximum is None else int(item.maximum),
                int(item.waiting or 0),
                item.owner,
            )
            for item in read_all(self.C, list(dict.fromkeys(counter_ids)))
        }

    def scan(self, prefix: str = "") -> dict[str, int]:
        return {item.counter_id: int(item.value or 0) for item in self.C.scan() if item.counter_id.startswith(prefix)}

    def held_ids(self) -> list[str]:
        return [item.counter_id for shard in index_shards(HELD) for item in self.C.by_held.query(shard)]

    def held(self) -> dict[str, CounterReading]:
        return self.read(self.held_ids())

    def repair(self, counter_id: str, observed: int, value: int, quiet_since: float, now: float) -> bool:
        C = self.C
        unchanged = (C.value == observed) if observed else (C.value.does_not_exist() | (C.value == 0))
        quiet = C.changed_at.does_not_exist() | (C.changed_at <= quiet_since)
        held: Action = C.held.remove() if value == 0 else C.held.set(index_shard(HELD, counter_id))
        return conditionally(
            lambda: C(counter_id).update(
                actions=[C.value.set(value), C.changed_at.set(now), held], condition=unchanged & quiet
            )
        )

    def relabel(self, counter_id: str, label: str) -> bool:
        C = self.C
        nothing_outstanding = C.value.does_not_exist() | (C.value == 0)
        action = C.label.set(label) if label else C.label.remove()
        return conditionally(
            lambda: C(counter_id).update(actions=[action], condition=nothing_outstanding | labelled(C, label))
        )

    def forget(self, counter_id: str, quiet_since: float) -> bool:
        C = self.C
        zero = C.value.does_not_exist() | (C.value == 0)
        quiet = C.changed_at.does_not_exist() | (C.changed_at <= quiet_since)
        return conditionally(
            lambda: C(counter_id).update(actions=[C.held.remove()], condition=C.held.exists() & zero & quiet)
        )


class DynamoQuotaStore:
    """Principals' quota overrides: the record (`quota#PRINCIPAL`, for reading and audit) and the maximum kept on each
    counter it bounds (what the admission and running-slot conditions read), written in one transaction."""

    def __init__(self, models: Models) -> None:
        self.C = models.Counter

    def get(self, principal: str, tenant: str | None = None) -> Quota | None:
        item = get_item(self.C, quota_key(principal, tenant))
        if item is None:
            return None
        return Quota(
            principal,
            None if item.max_outstanding is None else int(item.max_outstanding),
            None if item.max_running is None else int(item.max_running),
            item.updated_by or "",
            float(item.changed_at or 0.0),
            item.reason,
            None if tenant == principal else tenant,
        )

    def put(self, quota: Quota, bounds: Mapping[str, int | None]) -> None:
        C = self.C
        record = C(
            quota_key(quota.principal, quota.tenant),
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

    def key_rates(self, principal: str, tenant: str | None = None) -> KeyRates | None:
        item = get_item(self.C, key_rates_key(principal, tenant))
        return None if item is None or not item.spec else to_key_rates(item)

    def put_key_rates(self, rates: KeyRates) -> None:
        C = self.C
        item = C(key_rates_key(rates.principal, rates.tenant))
        if rates.rates:
            item.update(actions=[C.spec.set(rates.to_dict()), C.changed_at.set(rates.at)])
        else:
            item.delete()

    def clear(self, principal: str, tenant: str | None, bounds: Sequence[str]) -> bool:
        C = self.C
        try:
            with transaction(C) as tx:
                tx.delete(RECORD, C(quota_key(principal, tenant)), condition=C.counter_id.exists())
                for counter in bounds:
                    tx.update(f"bound:{counter}", C(counter), [C.maximum.remove()])
        except TransactionFailed as failed:
            if RECORD in failed.failed:
                return False
            raise
        return True


def to_key_rates(item: CounterItem) -> KeyRates:
    """A `keyrates#P[#T]` item as the settings it holds."""
    _, principal, *tenant = item.counter_id.split(SEPARATOR)
    return KeyRates.from_dict(principal, tenant[0] if tenant else None, item.spec or {})


def bucket_actions(C: Any, minute: int, count: int, amount: int) -> list[Action]:
    """An add to a minute's bucket (its first creates it): the same whether alone or in a transaction."""
    return [C.value.add(count), C.total.add(amount), C.minute.set(minute), C.expires_at.set(expires_at(minute))]


class DynamoMinuteBuckets:
    """Adding is one unconditional UpdateItem on the minute's own item (ADD; the minute and the expiry set); reading
    a window is one BatchGetItem."""

    def __init__(self, models: Models) -> None:
        self.C = models.Counter

    def add(self, bucket_id: str, minute: int, count: int, amount: int) -> None:
        single_write(lambda: self.C(bucket_id).update(actions=bucket_actions(self.C, minute, count, amount)))

    def read(self, bucket_ids: Sequence[str]) -> dict[str, Bucket]:
        wanted = list(dict.fromkeys(bucket_ids))
        return {
            item.counter_id: Bucket(int(item.minute), int(item.value or 0), int(item.total or 0))
            for item in (self.C.batch_get(wanted) if wanted else [])
            if item.minute is not None
        }


def labelled(C: Any, label: str) -> Any:
    """The site's counter names `label` as the dependency set its work waits by (none: no label)."""
    return C.label == label if label else C.label.does_not_exist()
