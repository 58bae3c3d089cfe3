"""Dependencies on the counters table: `dep#ID` (an operator's settings, the breaker's state), the running shards
`deprun#ID#k` (each carrying the breaker's flag), the rate buckets `deprate#ID#KIND`, the failure windows
`depfail#ID#WINDOW`, the deliveries it holds `dephold#ID#LANE`, and `dep-index` (every id a site named or an
operator set)."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any, cast

from pynamodb.constants import UPDATED_OLD
from pynamodb.expressions.condition import size
from pynamodb.expressions.operand import Value, _ListAppend

from sitedispatch.aws.events import EventOutbox
from sitedispatch.aws.tables import CounterItem
from sitedispatch.aws.writes import TransactionFailed, conditionally, get_item, get_items, read_all, transaction
from sitedispatch.domain.dependencies import BREAKER, BreakerState, Dependency, DependencyReading, Rate
from sitedispatch.domain.events import dependency_changed
from sitedispatch.domain.model import HeldDelivery, Kind
from sitedispatch.flow.dependencies import HELD_KEPT, dependency_key, failures_key, held_key, rate_key, running_shards

INDEX = "dep-index"
EVIDENCE_KEPT = 10
FAILURE_WINDOW_TTL_S = 86_400


class DynamoDependencyStore:
    def __init__(self, counters: type[CounterItem], outbox: EventOutbox) -> None:
        self.C = counters
        self.outbox = outbox

    def read(self, dependency_ids: Sequence[str], kind: Kind, also: Sequence[str] = ()) -> DependencyReading:
        C = self.C
        keys: list[str] = list(also)
        for dependency_id in dependency_ids:
            keys.append(dependency_key(dependency_id))
            keys += running_shards(dependency_id)
            keys += [rate_key(dependency_id, Rate(1, 1.0)), rate_key(dependency_id, Rate(1, 1.0, kind=kind))]
        keys = list(dict.fromkeys(keys))  # BatchGetItem refuses a key twice
        found = {item.counter_id: item for item in get_items(*((C, k) for k in keys)) if isinstance(item, C)}
        dependencies = {
            dependency_id: to_dependency(found[dependency_key(dependency_id)])
            for dependency_id in dependency_ids
            if dependency_key(dependency_id) in found
        }
        running = {
            dependency_id: sum(int(found[s].value or 0) for s in running_shards(dependency_id) if s in found)
            for dependency_id in dependency_ids
        }
        tats = {k: float(item.tat) for k, item in found.items() if item.tat is not None}
        return DependencyReading(dependencies, running, tats)

    def get(self, dependency_id: str) -> Dependency | None:
        item = get_item(self.C, dependency_key(dependency_id))
        return None if item is None else to_dependency(item)

    def list(self, dependency_ids: Collection[str] | None = None) -> list[Dependency]:
        if dependency_ids is None:
            index = get_item(self.C, INDEX)
            dependency_ids = set(cast(set[str], index.principals or set())) if index is not None else set()
        ids = sorted(set(dependency_ids))
        found = {
            to_dependency(item).dependency_id: to_dependency(item)
            for item in read_all(self.C, [dependency_key(i) for i in ids])
        }
        return [found.get(i) or Dependency(i) for i in ids]

    def running(self, dependency_ids: Sequence[str]) -> dict[str, int]:
        shards = {shard: i for i in dependency_ids for shard in running_shards(i)}
        counts = dict.fromkeys(dependency_ids, 0)
        for item in read_all(self.C, list(shards)):
            counts[shards[item.counter_id]] += int(item.value or 0)
        return counts

    def named(self, dependency_ids: Sequence[str], principal: str, site_id: str, now: float) -> None:
        if not dependency_ids:
            return
        C = self.C
        with transaction(C) as tx:
            # the index's member ids are kept in its `principals` set (a set of strings the item already has)
            tx.update("index", C(INDEX), [C.principals.add(set(dependency_ids)), C.changed_at.set(now)])
            for i, dependency_id in enumerate(dependency_ids):
                tx.update(
                    f"dep:{i}",
                    C(dependency_key(dependency_id)),
                    [C.principals.add({principal}), C.sites.add({site_id}), C.changed_at.set(now)],
                )

    def unnamed(self, dependency_ids: Sequence[str], site_id: str, principal: str | None, now: float) -> None:
        if not dependency_ids:
            return
        C = self.C
        with transaction(C) as tx:
            for i, dependency_id in enumerate(dependency_ids):
                gone = [C.principals.delete({principal})] if principal is not None else []
                tx.update(
                    f"dep:{i}",
                    C(dependency_key(dependency_id)),
                    [C.sites.delete({site_id}), *gone, C.changed_at.set(now)],
                )

    def buckets(self, counters: Sequence[str]) -> dict[str, float]:
        return {item.counter_id: float(item.tat) for item in read_all(self.C, list(counters)) if item.tat is not None}

    def put_settings(
        self, dependency_id: str, max_running: int | None, rates: tuple[Rate, ...], by: str, reason: str, now: float
    ) -> Dependency:
        C = self.C
        spec = {
            "max_running": max_running,
            "rates": [rate.to_dict() for rate in rates],
            "by": by,
            "reason": reason,
            "at": now,
        }
        with transaction(C) as tx:
            tx.update("dep", C(dependency_key(dependency_id)), [C.spec.set(spec), C.changed_at.set(now)])
            tx.update("index", C(INDEX), [C.principals.add({dependency_id}), C.changed_at.set(now)])
        found = self.get(dependency_id)
        assert found is not None
        return found

    def pause(self, dependency_id: str, reason: str, by: str, now: float) -> Dependency | None:
        C = self.C
        state = [
            C.state.set(BreakerState.PAUSED.value),
            C.reason.set(reason),
            C.updated_by.set(by),
            C.changed_at.set(now),
        ]
        not_paused = C.state.does_not_exist() | (C.state != BreakerState.PAUSED.value)
        return self._change(dependency_id, state, not_paused, blocked=True, paused=True, by=by, now=now, reason=reason)

    def resume(self, dependency_id: str, by: str, now: float, probe: str | None = None) -> Dependency | None:
        C = self.C
        closed = [
            C.state.set(BreakerState.CLOSED.value),
            C.updated_by.set(by),
            C.changed_at.set(now),
            C.reason.remove(),
            C.reopen_at.remove(),
            C.probe.remove(),
            C.probe_at.remove(),
        ]
        condition = C.state.exists() & (C.state != BreakerState.CLOSED.value)
        if probe is not None:
            condition = (C.state == BreakerState.HALF_OPEN.value) & (C.probe == probe)
        return self._change(dependency_id, closed, condition, blocked=False, paused=False, by=by, now=now)

    def open(
        self, dependency_id: str, reason: str, evidence: tuple[dict[str, Any], ...], now: float, cooldown_s: float
    ) -> Dependency | None:
        C = self.C
        opened = [
            C.state.set(BreakerState.OPEN.value),
            C.reason.set(reason),
            C.updated_by.set(BREAKER),
            C.changed_at.set(now),
            C.reopen_at.set(now + cooldown_s),
            C.evidence.set(list(evidence)),
            C.total.set(cooldown_s),  # the cooldown in effect (a failed probe doubles it)
        ]
        closed = C.state.does_not_exist() | (C.state == BreakerState.CLOSED.value)
        return self._change(
            dependency_id,
            opened,
            closed,
            blocked=True,
            paused=True,
            by=BREAKER,
            now=now,
            reason=reason,
            evidence=evidence,
        )

    def hold(self, dependency_id: str, held: HeldDelivery, now: float) -> bool:
        C = self.C
        item, kept = C(held_key(dependency_id, held.lane)), f"{now:.6f} {held.receipt}"
        entry = cast(Any, C.deliveries)[held.operation_id]  # a document path into the map
        room = (size(C.deliveries) < HELD_KEPT) | entry.exists()
        into_the_map = partial(item.update, actions=[entry.set(kept)], condition=C.deliveries.exists() & room)
        if conditionally(into_the_map):
            return True
        first = partial(
            item.update,
            actions=[C.deliveries.set({held.operation_id: kept})],
            condition=C.deliveries.does_not_exist(),
        )
        return conditionally(first) or conditionally(into_the_map)  # (the map may have appeared in between)

    def take_held(self, dependency_id: str, lane: str, limit: int | None = None) -> tuple[HeldDelivery, ...]:
        C = self.C
        counter_id = held_key(dependency_id, lane)
        if limit is None:  # all of them, atomically
            taken: list[dict[str, Any]] = []

            def take() -> None:
                answer = C._get_connection().update_item(
                    counter_id,
                    actions=[C.deliveries.remove()],
                    condition=C.deliveries.exists(),
                    return_values=UPDATED_OLD,
                )
                raw = answer.get("Attributes", {}).get("deliveries", {}).get("M", {})
                taken.append({operation_id: value["S"] for operation_id, value in raw.items()})

            return _oldest(taken[0], lane) if conditionally(take) else ()
        found = get_item(C, counter_id)
        kept = cast(dict[str, str], found.deliveries.as_dict()) if found and found.deliveries else {}
        chosen: list[HeldDelivery] = []
        for held in _oldest(kept, lane):
            if len(chosen) >= limit:
                break
            entry = cast(Any, C.deliveries)[held.operation_id]
            as_read = entry == kept[held.operation_id]  # not kept again meanwhile by a later receive
            if conditionally(partial(C(counter_id).update, actions=[entry.remove()], condition=as_read)):
                chosen.append(held)
        return tuple(chosen)

    def elect_probe(self, dependency_id: str, operation_id: str, now: float, probe_timeout_s: float) -> bool:
        C = self.C
        due = ((C.state == BreakerState.OPEN.value) & (C.reopen_at <= now)) | (
            (C.state == BreakerState.HALF_OPEN.value)
            & ((C.probe_at < now - probe_timeout_s) | (C.probe == operation_id))
        )
        try:
            with transaction(C) as tx:
                tx.update(
                    "dep",
                    C(dependency_key(dependency_id)),
                    [C.state.set(BreakerState.HALF_OPEN.value), C.probe.set(operation_id), C.probe_at.set(now)],
                    condition=due,
                )
                for shard in running_shards(dependency_id):
                    tx.update(f"shard:{shard}", C(shard), [C.blocked.set(True), C.probe.set(operation_id)])
        except TransactionFailed:
            return False
        return True

    def probe_failed(self, dependency_id: str, operation_id: str, now: float, cooldown_max_s: float) -> bool:
        C = self.C
        current = self.get(dependency_id)
        if current is None or current.state != BreakerState.HALF_OPEN or current.probe != operation_id:
            return False
        cooldown = min((current.cooldown_s or 1.0) * 2, cooldown_max_s)
        try:
            with transaction(C) as tx:
                tx.update(
                    "dep",
                    C(dependency_key(dependency_id)),
                    [
                        C.state.set(BreakerState.OPEN.value),
                        C.reopen_at.set(now + cooldown),
                        C.total.set(cooldown),
                        C.probe.remove(),
                        C.probe_at.remove(),
                    ],
                    condition=(C.state == BreakerState.HALF_OPEN.value) & (C.probe == operation_id),
                )
                for shard in running_shards(dependency_id):
                    tx.update(f"shard:{shard}", C(shard), [C.blocked.set(True), C.probe.remove()])
        except TransactionFailed:
            return False
        return True

    def record_failure(
        self, dependency_id: str, failure: dict[str, Any], now: float, *, window_s: float
    ) -> tuple[int, int, tuple[dict[str, Any], ...]]:
        C = self.C
        window = int(now // window_s)
        item = C(failures_key(dependency_id, window))
        entry = json.dumps(failure, sort_keys=True)
        item.update(
            actions=[
                C.value.add(1),
                C.sites.add({str(failure["site_id"])}),
                C.operations.set(_ListAppend(C.operations | [], Value([entry], attribute=C.operations))),
                C.expires_at.set(int(now + FAILURE_WINDOW_TTL_S)),
            ]
        )
        recent = tuple(json.loads(str(raw)) for raw in (item.operations or [])[-EVIDENCE_KEPT:])
        return int(item.value or 0), len(item.sites or ()), recent

    def _change(
        self,
        dependency_id: str,
        actions: Sequence[Any],
        condition: Any,
        *,
        blocked: bool,
        paused: bool,
        by: str,
        now: float,
        reason: str | None = None,
        evidence: Any = None,
    ) -> Dependency | None:
        """The state written with its flag on every running shard and one event per principal whose site names it
        (in the same transaction: a change is told exactly when it happens)."""
        C = self.C
        before = self.get(dependency_id) or Dependency(dependency_id)
        try:
            with transaction(C) as tx:
                tx.update("dep", C(dependency_key(dependency_id)), [*actions], condition=condition)
                for shard in running_shards(dependency_id):
                    flag = (
                        [C.blocked.set(True), C.probe.remove()] if blocked else [C.blocked.remove(), C.probe.remove()]
                    )
                    tx.update(f"shard:{shard}", C(shard), flag)
                for principal in sorted(before.principals)[:90]:
                    told = dependency_changed(dependency_id, principal, paused, by, now, reason, evidence or ())
                    self.outbox.add(tx, told, name=f"event:{principal}")
        except TransactionFailed:
            return None
        return self.get(dependency_id)


def _oldest(kept: dict[str, str], lane: str) -> tuple[HeldDelivery, ...]:
    """Deliveries kept as operation id -> "held-at receipt", oldest first."""
    ordered = sorted(kept.items(), key=lambda pair: (float(pair[1].split(" ", 1)[0]), pair[0]))
    return tuple(HeldDelivery(operation_id, lane, value.split(" ", 1)[1]) for operation_id, value in ordered)


def to_dependency(item: CounterItem) -> Dependency:
    spec: dict[str, Any] = item.spec or {}
    dependency_id = item.counter_id.split("#", 1)[1]
    return Dependency(
        dependency_id,
        max_running=spec.get("max_running"),
        rates=tuple(Rate.from_dict(raw) for raw in spec.get("rates") or ()),
        state=BreakerState(item.state or BreakerState.CLOSED.value),
        reason=item.reason,
        changed_by=item.updated_by,
        changed_at=item.changed_at,
        reopen_at=item.reopen_at,
        cooldown_s=item.total,
        probe=item.probe,
        probe_at=item.probe_at,
        evidence=tuple(item.evidence or ()),
        settings_by=spec.get("by"),
        settings_reason=spec.get("reason"),
        settings_at=spec.get("at"),
        principals=frozenset(cast(set[str], item.principals or set())),
        sites=frozenset(cast(set[str], item.sites or set())),
    )
