"""The sites table: registration, the mutation lease with its fence, health and the live pointer (SiteStore)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, cast

from pynamodb.constants import UPDATED_OLD
from pynamodb.expressions.update import Action

from sitedispatch.aws.events import EventOutbox
from sitedispatch.aws.paging import read_page, request_rows, start_key
from sitedispatch.aws.tables import DUE_PARTITION, LIVE, Models, SiteItem, index_shard, index_shards
from sitedispatch.aws.writes import TransactionFailed, conditionally, get_item, read_all, transaction
from sitedispatch.domain.errors import Conflict, LeaseHeld, NotFound, StaleFence
from sitedispatch.domain.events import AUTOMATIC, site_paused
from sitedispatch.domain.model import REFERENCE_DRIVER, HeldDelivery, Lease, Site, SiteConnection
from sitedispatch.domain.paging import Page
from sitedispatch.domain.ports import checked_registration
from sitedispatch.flow.counters import site_counter

PAUSE_RACES = 5  # a pause or resume looks again this often when the site's state changed under it


def to_site(item: SiteItem) -> Site:
    return Site(
        site_id=item.site_id,
        principal=item.principal,
        created_at=float(item.created_at),
        head_version=int(item.head_version or 0),
        head_revision=item.head_revision,
        fence=int(item.fence or 0),
        lease_owner=item.lease_owner,
        lease_expires_at=item.lease_expires_at,
        paused=bool(item.paused),
        pause_reason=item.pause_reason,
        paused_by=item.paused_by,
        paused_at=None if item.paused_at is None else float(item.paused_at),
        consecutive_failures=int(item.consecutive_failures or 0),
        avg_operation_s=None if item.avg_operation_s is None else float(item.avg_operation_s),
        live_seq=int(item.live_seq or 0),
        live_revision=item.live_revision,
        live_at=item.live_at,
        next_due_at=None if item.next_due_at is None else float(item.next_due_at),
        connection=SiteConnection(item.driver or REFERENCE_DRIVER, item.endpoint, item.credential_ref),
        dependencies=tuple(cast(list[str], item.dependencies or [])),
    )


def lease_free(S: Any, operation_id: str, now: float) -> Any:
    """The site's lease is free for `operation_id` (Site.lease_free_for, as a condition DynamoDB evaluates)."""
    return S.lease_owner.does_not_exist() | (S.lease_owner == operation_id) | (S.lease_expires_at <= now)


def lease_actions(S: Any, operation_id: str, now: float, duration: float, fence: int | None = None) -> list[Action]:
    """Taking the lease: the fence moves up by one (or to `fence`, the one read plus one), owner and expiry set."""
    moved = S.fence.add(1) if fence is None else S.fence.set(fence)
    return [moved, S.lease_owner.set(operation_id), S.lease_expires_at.set(now + duration)]


def claim_lease_update(S: Any, site: Site, operation_id: str, now: float, duration: float) -> tuple[list[Action], Any]:
    """The lease claim as one item of a transaction (the operation store starts the attempt in the same one): its
    updates and its condition, the site as `site` was read (its fence unchanged) and its lease free."""
    as_read = (S.fence == site.fence) if site.fence else (S.fence.does_not_exist() | (S.fence == 0))
    condition = S.site_id.exists() & as_read & lease_free(S, operation_id, now)
    return lease_actions(S, operation_id, now, duration, site.fence + 1), condition


def new_site(S: Any, site_id: str, principal: str, now: float, connection: SiteConnection | None = None) -> Any:
    """A site's item as its registration writes it (only while no item exists: the caller's condition)."""
    given = connection or SiteConnection()
    return S(
        site_id,
        principal=principal,
        created_at=now,
        driver=given.driver,
        endpoint=given.endpoint,
        credential_ref=given.credential_ref,
    )


class DynamoSiteStore:
    def __init__(self, models: Models, outbox: EventOutbox) -> None:
        self.M = models.Site
        self.C = models.Counter  # a site's admission counter keeps its owner: deleted with it
        self.outbox = outbox

    def get(self, site_id: str) -> Site | None:
        item = get_item(self.M, site_id)
        return None if item is None else to_site(item)

    def get_many(self, site_ids: Sequence[str]) -> dict[str, Site]:
        return {item.site_id: to_site(item) for item in read_all(self.M, list(dict.fromkeys(site_ids)))}

    def register(self, site_id: str, principal: str, now: float, connection: SiteConnection | None = None) -> Site:
        M = self.M
        conditionally(
            lambda: new_site(M, site_id, principal, now, connection).save(condition=M.site_id.does_not_exist())
        )
        # taken: checked below
        site = self.get(site_id)
        assert site is not None
        return checked_registration(site, principal, connection)

    def set_dependencies(self, site_id: str, dependency_ids: tuple[str, ...]) -> Site:
        """What the site shares with others, for attempts not yet started (each start reads the site). NotFound if
        unknown."""
        M = self.M
        actions: list[Action] = (
            [M.dependencies.set(cast(Any, list(dependency_ids)))] if dependency_ids else [M.dependencies.remove()]
        )
        if not conditionally(lambda: M(site_id).update(actions=actions, condition=M.site_id.exists())):
            raise NotFound(f"site {site_id} not found")
        site = self.get(site_id)
        assert site is not None
        return site

    def claim_lease(self, site_id: str, operation_id: str, now: float, duration: float) -> Lease:
        M = self.M
        item = M(site_id)
        if not conditionally(
            lambda: item.update(
                actions=lease_actions(M, operation_id, now, duration),
                condition=M.site_id.exists() & lease_free(M, operation_id, now),
            )
        ):
            current = self.get(site_id)
            raise LeaseHeld(
                site_id,
                current.lease_owner if current else None,
                float(current.lease_expires_at or now) if current else now,
            )
        return Lease(site_id, operation_id, int(item.fence), float(item.lease_expires_at))

    def extend_lease(self, lease: Lease, now: float, duration: float) -> Lease:
        M = self.M
        if not conditionally(
            lambda: M(lease.site_id).update(
                actions=[M.lease_expires_at.set(now + duration)],
                condition=(M.fence == lease.fence) & (M.lease_owner == lease.owner),
            )
        ):
            raise StaleFence(f"site {lease.site_id}: fence {lease.fence} is no longer current")
        return Lease(lease.site_id, lease.owner, lease.fence, now + duration)

    def release_lease(self, lease: Lease) -> bool:
        M = self.M
        return conditionally(
            lambda: M(lease.site_id).update(
                actions=[M.lease_owner.remove(), M.lease_expires_at.remove()],
                condition=(M.fence == lease.fence) & (M.lease_owner == lease.owner),
            )
        )

    def promoted_since(self, since: float, limit: int = 1000) -> list[Site]:
        """Sites promoted at or after `since`, from the sparse by-live index (keys only), then read consistently in
        batches of 100: what a sweep reads grows with recent promotions, not with the fleet."""
        M = self.M
        ids = [
            item.site_id
            for shard in index_shards(LIVE)
            for item in M.by_live.query(shard, M.live_at >= since, limit=limit)
        ][:limit]
        return [to_site(item) for item in read_all(M, ids)]

    def due(self, now: float, limit: int = 1000) -> list[Site]:
        """Earliest first, from the by-due index (eventually consistent on AWS: a just-committed head may be missed
        until the next minute's sweep, and a stale entry is harmless because wp_cron is idempotent per minute)."""
        M = self.M
        return [to_site(item) for item in M.by_due.query(DUE_PARTITION, M.next_due_at <= now, limit=limit)]

    def page(
        self,
        *,
        accept: Callable[[Site], bool] = lambda site: True,
        cursor: str | None = None,
        limit: int = 100,
        reads: int = 1000,
    ) -> Page[Site]:
        """The table's order (a scan), at most `reads` rows read (aws/paging.py)."""
        items = self.M.scan(
            last_evaluated_key=start_key(cursor, "sites", {"site_id": "S"}), page_size=request_rows(limit, reads)
        )
        return read_page(items, to_site, accept, limit, reads, "sites")

    def list(self, limit: int = 100) -> list[Site]:
        """Up to `limit` sites, by id. A scan reads in hash order, so past `limit` sites which ones are listed is
        DynamoDB's choice."""
        sites = [to_site(item) for item in self.M.scan(limit=limit)]
        return sorted(sites, key=lambda s: s.site_id)

    def set_paused(self, site_id: str, paused: bool, reason: str | None, by: str, now: float) -> Site:
        M = self.M
        reason_action = M.pause_reason.set(reason) if paused and reason is not None else M.pause_reason.remove()
        actions: list[Action] = [M.paused.set(paused), reason_action]
        if paused:
            actions += [M.paused_by.set(by), M.paused_at.set(now)]
        else:
            actions += [M.consecutive_failures.set(0), M.paused_by.remove(), M.paused_at.remove()]
        for _ in range(PAUSE_RACES):
            current = get_item(M, site_id)
            if current is None:
                raise NotFound(f"site {site_id} not found")
            item = M(site_id)
            if bool(current.paused) == paused:  # no change of state: no event (a new reason is recorded)
                if conditionally(partial(item.update, actions=actions, condition=_paused_is(M, paused))):
                    return to_site(item)
                continue
            event = site_paused(to_site(current), paused, reason, by, now)
            try:
                with transaction(M) as tx:
                    tx.update("site", item, actions, condition=_paused_is(M, not paused))
                    self.outbox.add(tx, event)
            except TransactionFailed:
                continue  # paused or resumed meanwhile: look again
            site = to_site(current)
            failures = site.consecutive_failures if paused else 0
            return replace(
                site,
                paused=paused,
                pause_reason=reason if paused else None,
                paused_by=by if paused else None,
                paused_at=now if paused else None,
                consecutive_failures=failures,
            )
        raise Conflict(f"site {site_id} was paused and resumed {PAUSE_RACES} times while this request looked")

    def hold_until_resumed(self, site_id: str, held: HeldDelivery) -> bool:
        M = self.M
        item, kept = M(site_id), f"{held.lane} {held.receipt}"
        paused = _paused_is(M, True)
        entry = cast(Any, M.held)[held.operation_id]  # a document path into the map (pynamodb's raw map)
        into_the_map = partial(item.update, actions=[entry.set(kept)], condition=paused & M.held.exists())
        if conditionally(into_the_map):
            return True
        first = partial(
            item.update, actions=[M.held.set({held.operation_id: kept})], condition=paused & M.held.does_not_exist()
        )
        return conditionally(first) or conditionally(into_the_map)  # (the map may have appeared in between)

    def take_held(self, site_id: str) -> tuple[HeldDelivery, ...]:
        M = self.M
        taken: list[dict[str, Any]] = []

        def take() -> None:
            answer = M._get_connection().update_item(
                site_id, actions=[M.held.remove()], condition=M.held.exists(), return_values=UPDATED_OLD
            )
            taken.append(answer.get("Attributes", {}).get("held", {}).get("M", {}))

        if not conditionally(take):
            return ()
        return tuple(
            HeldDelivery(operation_id, *value["S"].split(" ", 1)) for operation_id, value in sorted(taken[0].items())
        )

    def delete_empty(self, site_id: str) -> bool:
        M, C = self.M, self.C
        try:
            with transaction(M) as tx:
                # nothing committed, and nothing outstanding: every operation holds the site's counter until it ends
                tx.delete("site", M(site_id), condition=M.site_id.exists() & (M.head_version == 0))
                tx.delete("counter", C(site_counter(site_id)), condition=C.value.does_not_exist() | (C.value == 0))
        except TransactionFailed:
            return False
        return True

    def record_failure(self, site_id: str, pause_at: int, reason: str, now: float) -> Site:
        """Count a failed attempt; the one that reaches `pause_at` in a row pauses the site (conditional, once),
        with its event."""
        M = self.M
        item = M(site_id)
        if not conditionally(
            lambda: item.update(actions=[M.consecutive_failures.add(1)], condition=M.site_id.exists())
        ):
            raise NotFound(f"site {site_id} not found")
        site = to_site(item)
        if site.consecutive_failures >= pause_at and not site.paused:
            with contextlib.suppress(TransactionFailed):  # paused meanwhile (by an operator, or a failure at once)
                with transaction(M) as tx:
                    paused = [
                        M.paused.set(True),
                        M.pause_reason.set(reason),
                        M.paused_by.set(AUTOMATIC),
                        M.paused_at.set(now),
                    ]
                    tx.update("site", M(site_id), paused, condition=_paused_is(M, False))
                    self.outbox.add(tx, site_paused(site, True, reason, AUTOMATIC, now))
                return replace(site, paused=True, pause_reason=reason, paused_by=AUTOMATIC, paused_at=now)
            return self.get(site_id) or site
        return site


def _paused_is(M: Any, paused: bool) -> Any:
    """The site exists and is (not) paused (an item written before `paused` existed counts as not paused)."""
    if paused:
        return M.site_id.exists() & (M.paused == True)  # noqa: E712 - a DynamoDB condition
    return M.site_id.exists() & (M.paused.does_not_exist() | (M.paused == False))  # noqa: E712


def promotion(S: Any, site_id: str, seq: int, revision_id: str, now: float) -> tuple[list[Action], Any]:
    """The site's live pointer moved to publication `seq` (and into the by-live index), and the condition that
    keeps it monotonic: the pointer is behind `seq`."""
    actions = [
        S.live_seq.set(seq),
        S.live_revision.set(revision_id),
        S.live_at.set(now),
        S.live.set(index_shard(LIVE, site_id)),
    ]
    return actions, S.site_id.exists() & (S.live_seq.does_not_exist() | (S.live_seq < seq))
