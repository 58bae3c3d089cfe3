"""The publications table: each publication's plan and fan-in (PublicationStore)."""

from __future__ import annotations

import contextlib
from typing import Any

from pynamodb.expressions.update import Action

from sitedispatch.aws.events import EventOutbox
from sitedispatch.aws.sites import promotion, to_site
from sitedispatch.aws.tables import OPEN, Models, PublicationItem, SiteItem, index_shards
from sitedispatch.aws.writes import TransactionFailed, conditionally, get_item, get_items, transaction
from sitedispatch.domain.errors import Conflict, NotFound
from sitedispatch.domain.events import Event
from sitedispatch.domain.model import MAX_FAILURE_CHARS, Publication, PublicationStatus, Site


def to_publication(item: PublicationItem) -> Publication:
    return Publication(
        site_id=item.site_id,
        seq=int(item.seq),
        revision_id=item.revision_id,
        operation_id=item.operation_id,
        status=PublicationStatus(item.status),
        created_at=float(item.created_at),
        total_chunks=None if item.total_chunks is None else int(item.total_chunks),
        done_chunks=frozenset(int(n) for n in (item.done_chunks or ())),
        finished_at=item.finished_at,
        retried_steps=int(item.retried_steps or 0),
        last_failure=item.last_failure,
    )


class DynamoPublicationStore:
    def __init__(self, models: Models, outbox: EventOutbox) -> None:
        self.M = models.Publication
        self.S = models.Site
        self.outbox = outbox

    def get_with_site(self, site_id: str, seq: int) -> tuple[Publication | None, Site | None]:
        publication, site = get_items((self.M, site_id, seq), (self.S, site_id))
        return (
            to_publication(publication) if isinstance(publication, PublicationItem) else None,
            to_site(site) if isinstance(site, SiteItem) else None,
        )

    def get(self, site_id: str, seq: int) -> Publication | None:
        item = get_item(self.M, site_id, seq)
        return None if item is None else to_publication(item)

    def _update(self, site_id: str, seq: int, actions: list[Any], condition: Any) -> Publication:
        item = self.M(site_id, seq)
        if not conditionally(lambda: item.update(actions=actions, condition=self.M.seq.exists() & condition)):
            current = self.get(site_id, seq)
            if current is None:
                raise NotFound(f"publication {site_id}#{seq}")
            raise Conflict(f"publication {site_id}#{seq} is {current.status.value} with {current.total_chunks} chunks")
        return to_publication(item)

    def plan(self, site_id: str, seq: int, total_chunks: int, now: float) -> Publication:
        M = self.M
        return self._update(
            site_id,
            seq,
            [M.total_chunks.set(total_chunks)],
            M.total_chunks.does_not_exist() | (M.total_chunks == total_chunks),
        )

    def chunk_done(self, site_id: str, seq: int, chunk: int) -> Publication:
        M = self.M
        return self._update(site_id, seq, [M.done_chunks.add({chunk})], M.total_chunks.exists())

    def step_failed(self, site_id: str, seq: int, failure: str, retried: bool) -> None:
        M = self.M
        actions: list[Action] = [M.last_failure.set(failure[:MAX_FAILURE_CHARS])]
        if retried:
            actions.append(M.retried_steps.add(1))
        conditionally(lambda: M(site_id, seq).update(actions=actions, condition=M.seq.exists()))

    def publish(self, site_id: str, seq: int, revision_id: str, now: float, event: Event) -> bool:
        M, S = self.M, self.S
        actions, behind = promotion(S, site_id, seq, revision_id, now)
        try:
            with transaction(M) as tx:
                tx.update("live pointer", S(site_id), actions, condition=behind)
                tx.update(
                    "publication",
                    M(site_id, seq),
                    self._finished(PublicationStatus.PUBLISHED, now),
                    condition=M.seq.exists() & self._unfinished(),
                )
                self.outbox.add(tx, event)
        except TransactionFailed:
            return False
        return True

    def _finished(self, status: PublicationStatus, now: float) -> list[Any]:
        M = self.M
        return [M.status.set(status.value), M.finished_at.set(now), M.open.remove()]

    def _unfinished(self) -> Any:
        return self.M.status.is_in(PublicationStatus.PENDING.value, PublicationStatus.PLANNED.value)

    def finish(self, site_id: str, seq: int, status: PublicationStatus, now: float) -> None:
        with contextlib.suppress(Conflict):  # already finished by a duplicate finisher: the first word stands
            self._update(site_id, seq, self._finished(status, now), self._unfinished())

    def open_before(self, before: float, limit: int = 1000) -> list[Publication]:
        """Unfinished publications created before `before`, from the sparse by-open index (eventually consistent:
        one finished a moment ago may still be listed; resuming it again is harmless, its steps are idempotent)."""
        M = self.M
        found = [
            to_publication(item)
            for shard in index_shards(OPEN)
            for item in M.by_open.query(shard, M.created_at < before, limit=limit)
        ]
        return sorted(found, key=lambda p: p.created_at)[:limit]

    def list(self, site_id: str, limit: int = 100) -> list[Publication]:
        return [to_publication(item) for item in self.M.query(site_id, scan_index_forward=False, limit=limit)]
