"""The publication worker's core: plan a publication into chunks, render chunks in parallel, fan in, write the
receipt, promote monotonically, then update live.json.

Every step is idempotent: route objects and receipts are immutable (If-None-Match; rendering is deterministic so a
412 means the same bytes are there), the fan-in is a set (adding a chunk twice changes nothing), promotion is a
conditional update `live_seq < seq`, and live.json moves only forward. A step that fails is simply delivered again.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import chain, pairwise

from sitedispatch import observability as obs
from sitedispatch.concurrency import pool
from sitedispatch.domain.backoff import full_jitter
from sitedispatch.domain.delivery import Outcome, Result
from sitedispatch.domain.errors import NotFound, TransientError
from sitedispatch.domain.events import publication_live
from sitedispatch.domain.model import Publication, PublicationMessage, PublicationStatus, Site
from sitedispatch.domain.ports import BlobStore, Clock, PublicationQueue, PublicationStore, SiteStore, Visibility
from sitedispatch.domain.settings import Settings
from sitedispatch.kinds.contract import SiteDriver
from sitedispatch.kinds.registry import driver_for
from sitedispatch.publication.live import (
    canonical,
    chunk_part_key,
    chunk_receipt_key,
    receipt_key,
    revision_prefix,
    write_live_document,
)
from sitedispatch.publication.routes import Route
from sitedispatch.publication.sources import RoutePlan, RouteSource

PUT_CONCURRENCY = 8
SLICE_ROUTES = 4 * PUT_CONCURRENCY  # routes rendered between two looks at the clock
# A chunk's delivery starts no batch of routes it could not end this long before the function's timeout: what
# follows the last batch (its part or receipt, the fan-in of a last chunk, the promotion) needs time too.
FINISH_RESERVE_S = 5.0
SLOWEST_BATCHES_LEFT = 2  # and none unless this many of its slowest batch so far still fit
PLAN_CACHE_SIZE = 4
RECEIPT_INLINE_ROUTES = 10_000  # a receipt past this many routes names its chunks' receipts instead


@dataclass
class PublicationDeps:
    settings: Settings
    sites: SiteStore
    publications: PublicationStore
    blobs: BlobStore
    queue: PublicationQueue
    clock: Clock
    drivers: Mapping[str, SiteDriver]
    rng: random.Random = field(default_factory=random.Random)  # the jitter of a step's retry


@dataclass(frozen=True)
class Plan:
    """A revision's route source and its chunks: derived once per warm environment, reused by every chunk."""

    source: RouteSource
    chunks: RoutePlan


class PublicationWorker:
    def __init__(self, deps: PublicationDeps) -> None:
        self.deps = deps
        self._plans: OrderedDict[tuple[str, str], Plan] = OrderedDict()
        self._rng = deps.rng

    def _plan_for(self, site: Site, revision_id: str) -> Plan:
        key = (site.site_id, revision_id)
        plan = self._plans.get(key)
        if plan is None:
            source = driver_for(self.deps.drivers, site).route_source(self.deps.blobs, site, revision_id)
            plan = Plan(source, source.plan(self.deps.settings.publication_chunk_routes))
            self._plans[key] = plan
            while len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        return plan

    def process(
        self,
        message: PublicationMessage,
        visibility: Visibility | None = None,
        receive_count: int = 1,
        deadline: float | None = None,
    ) -> Result:
        """Handle one publications-queue message. Errors propagate: the message is delivered again; after a
        TransientError (a route the origin cannot serve now) it comes back after a backoff with full jitter, not
        after the queue's visibility timeout of minutes. `deadline`: when the invocation is stopped (the clock's
        time), if bounded; a chunk's delivery renders for at most `publication_slice_s` and ends well before it."""
        try:
            return self._process(message, deadline, receive_count)
        except Exception as exc:
            self._record_failure(message, f"{_label(message)}: {exc}", retried=False)
            if not isinstance(exc, TransientError):
                raise
            if visibility is not None:
                s = self.deps.settings
                delay = full_jitter(receive_count, s.backoff_base_s, s.backoff_cap_s, self._rng)
                visibility.change(delay)
                obs.count(obs.Metric.PublicationStepRetried)
                obs.logger.warning(
                    "publication step failed, retried",
                    extra={"error": str(exc), "code": exc.code, "retry_in_s": round(delay, 1)},
                )
            raise

    def _record_failure(self, message: PublicationMessage, failure: str, retried: bool) -> None:
        """What the operator sees of a step that did not finish; recording it never hides the failure itself."""
        try:
            self.deps.publications.step_failed(message.site_id, message.seq, failure, retried)
        except Exception as exc:
            obs.logger.warning("publication failure not recorded", extra={"error": repr(exc)})

    def _process(self, message: PublicationMessage, deadline: float | None, receive_count: int = 1) -> Result:
        d = self.deps
        obs.bind(site_id=message.site_id, seq=message.seq, step=message.step)
        publication, site = d.publications.get_with_site(message.site_id, message.seq)
        if publication is None or publication.revision_id != message.revision_id:
            obs.count(obs.Metric.PublicationUnknown)
            return Result(Outcome.ACKED, "unknown_publication")
        if publication.status in {PublicationStatus.PUBLISHED, PublicationStatus.SUPERSEDED}:
            return self._finished_already(publication, site)
        if site is not None and _is_live(site, publication):
            # This very publication was promoted and its finisher stopped before recording it: record it now.
            d.publications.finish(message.site_id, message.seq, PublicationStatus.PUBLISHED, d.clock.now())
            write_live_document(d.blobs, site)
            obs.count(obs.Metric.PublicationFinishRecovered)
            return Result(Outcome.ACKED, "already_live")
        if site is not None and site.live_seq >= message.seq:
            # A newer publication went live first: rendering this one would never be shown.
            d.publications.finish(message.site_id, message.seq, PublicationStatus.SUPERSEDED, d.clock.now())
            obs.count(obs.Metric.PublicationSuperseded)
            return Result(Outcome.ACKED, "superseded")
        if site is None:
            obs.logger.error("publication of a site that does not exist")
            return Result(Outcome.ACKED, "unknown_site")
        if receive_count > 1:  # an earlier delivery of this step did not finish: why, if it said, else it was stopped
            label = _label(message)
            known = publication.last_failure if (publication.last_failure or "").startswith(f"{label}:") else None
            stopped = f"{label}: an earlier delivery did not finish (timed out, or its environment stopped)"
            self._record_failure(message, known or stopped, retried=True)
        return self._step(message, publication, site, deadline)

    def _step(
        self, message: PublicationMessage, publication: Publication, site: Site, deadline: float | None
    ) -> Result:
        """The step's work, for an unfinished publication of a site that exists: plan, or a chunk (or its part)."""
        d = self.deps
        plan = self._plan_for(site, message.revision_id)
        total = plan.chunks.chunk_count()
        if message.step == "plan" and total <= 1:
            # One chunk: rendered here, not fanned out (no plan write, chunk message, chunk receipt or fan-in),
            # unless it does not fit in this delivery: then it is a plan of one chunk, continued.
            part = plan.chunks.chunk(0)
            entries, end = self._render(plan.source, publication, part, 0, self._until(deadline))
            if end == len(part):
                return self._finish(publication, site, self._receipt(publication, entries))
            planned = d.publications.plan(publication.site_id, publication.seq, 1, d.clock.now())
            self._hand_on(planned, PublicationMessage(site.site_id, message.revision_id, message.seq, 0), end, entries)
            return Result(Outcome.SUCCEEDED, "chunk 1/1: continued")
        if message.step == "plan":
            return self._plan(publication, total)
        if publication.total_chunks != total or not 0 <= message.chunk < total:
            obs.logger.error("chunk does not belong to the plan", extra={"total": publication.total_chunks})
            return Result(Outcome.ACKED, "chunk_outside_plan")
        part = plan.chunks.chunk(message.chunk)
        if message.resume_at >= len(part):
            obs.logger.error("continuation past its chunk's end", extra={"parts": message.parts})
            return Result(Outcome.ACKED, "chunk_outside_plan")
        if not self._render_chunk(plan.source, publication, message, part, self._until(deadline)):
            return Result(Outcome.SUCCEEDED, f"chunk {message.chunk + 1}/{total}: continued")
        done = d.publications.chunk_done(publication.site_id, publication.seq, message.chunk)
        if len(done.done_chunks) < total:
            return Result(Outcome.SUCCEEDED, f"chunk {message.chunk + 1}/{total}")
        return self._finish(done, site, self._fan_in(done, plan.chunks))

    def _plan(self, publication: Publication, total: int) -> Result:
        d = self.deps
        d.publications.plan(publication.site_id, publication.seq, total, d.clock.now())
        for chunk in range(total):
            d.queue.send(PublicationMessage(publication.site_id, publication.revision_id, publication.seq, chunk))
        obs.count(obs.Metric.PublicationPlanned)
        return Result(Outcome.SUCCEEDED, f"planned {total} chunks")

    def _until(self, deadline: float | None) -> float:
        """When this delivery of a chunk starts no more routes: after its slice of time (so a large site's chunks
        take turns with other sites' work), and well before the function's timeout."""
        until = self.deps.clock.now() + self.deps.settings.publication_slice_s
        return until if deadline is None else min(until, deadline - FINISH_RESERVE_S)

    def _render_chunk(
        self,
        source: RouteSource,
        publication: Publication,
        message: PublicationMessage,
        part: list[Route],
        until: float,
    ) -> bool:
        """Render the chunk's routes from where its last delivery stopped until `until`. True when the chunk is done
        (its receipt stored, from its parts' and this delivery's routes); False when the rest was handed on."""
        entries, end = self._render(source, publication, part, message.resume_at, until)
        if end < len(part):
            self._hand_on(publication, message, end, entries)
            return False
        key = self._chunk_key(publication, message.chunk)
        earlier = [self._part_routes(chunk_part_key(key, a, b)) for a, b in pairwise((0, *message.parts))]
        routes = [*chain(*earlier), *entries]
        self.deps.blobs.put_if_absent(key, canonical({"chunk": message.chunk, "routes": routes}))
        return True

    def _hand_on(
        self, publication: Publication, message: PublicationMessage, end: int, entries: list[dict[str, object]]
    ) -> None:
        """Store the routes this delivery rendered as a part of the chunk (immutable), and send the continuation
        that renders from `end`: it queues behind the work already waiting, so other sites take their turn."""
        start = message.resume_at
        key = chunk_part_key(self._chunk_key(publication, message.chunk), start, end)
        self.deps.blobs.put_if_absent(key, canonical({"chunk": message.chunk, "from": start, "routes": entries}))
        self.deps.queue.send(replace(message, parts=(*message.parts, end)))
        obs.count(obs.Metric.PublicationChunkContinued)
        obs.logger.info("chunk continued", extra={"chunk": message.chunk, "from": start, "to": end})

    @staticmethod
    def _chunk_key(publication: Publication, chunk: int) -> str:
        return chunk_receipt_key(publication.site_id, publication.revision_id, publication.total_chunks or 0, chunk)

    def _part_routes(self, key: str) -> list[dict[str, object]]:
        try:
            return list(json.loads(self.deps.blobs.get(key))["routes"])
        except NotFound:
            raise RuntimeError(f"a continued chunk's part {key} is missing") from None

    def _render(
        self,
        source: RouteSource,
        publication: Publication,
        part: list[Route],
        start: int = 0,
        until: float | None = None,
    ) -> tuple[list[dict[str, object]], int]:
        """Store each route's object (immutable) from `start`, and describe it for the receipt; the descriptions and
        where it stopped. With `until`, in batches: a batch starts only while the slowest so far fits twice before
        it (at least one batch always runs, so every delivery makes progress)."""
        d = self.deps
        prefix = revision_prefix(publication.site_id, publication.revision_id)

        def put(route: Route) -> dict[str, object]:
            key = prefix + route.key
            body = _stored(d.blobs, key) if source.reuses_stored else None
            if body is None:
                body = source.render(route)
                if not d.blobs.put_if_absent(key, body, route.content_type) and source.reuses_stored:
                    # an earlier delivery stored it first: the receipt describes those bytes (a deterministic source
                    # rendered the very same bytes, so it is spared the read)
                    body = d.blobs.get(key)
            return {
                "route": route.path,
                "key": route.key,
                "sha256": hashlib.sha256(body).hexdigest(),
                "size": len(body),
                "content_type": route.content_type,
            }

        entries: list[dict[str, object]] = []
        end, slowest = start, 0.0
        batch = len(part) if until is None else SLICE_ROUTES
        with pool(PUT_CONCURRENCY, "route-put") as puts:
            while end < len(part):
                began = d.clock.now()
                if until is not None and end > start and began + SLOWEST_BATCHES_LEFT * slowest > until:
                    break
                entries.extend(puts.map(put, part[end : end + batch]))
                end = min(end + batch, len(part))
                slowest = max(slowest, d.clock.now() - began)
        obs.count(obs.Metric.RoutesRendered, len(entries))
        return entries, end

    def _receipt(self, publication: Publication, entries: list[dict[str, object]]) -> dict[str, object]:
        return {
            "site_id": publication.site_id,
            "revision_id": publication.revision_id,
            "route_count": len(entries),
            "bytes": sum(int(str(e["size"])) for e in entries),
            "routes": entries,
        }

    def _fan_in(self, publication: Publication, plan: RoutePlan) -> dict[str, object]:
        """The receipt of a publication whose chunks are all stored, from their receipts, each checked against the
        plan. Up to RECEIPT_INLINE_ROUTES routes it lists every route; past that it names each chunk's receipt
        (with its digest, route count and bytes), so neither it nor its fan-in grows with the site."""
        site_id, revision_id = publication.site_id, publication.revision_id
        total = plan.chunk_count()
        inline = sum(plan.chunk_size(n) for n in range(total)) <= RECEIPT_INLINE_ROUTES
        entries: list[dict[str, object]] = []
        parts: list[dict[str, object]] = []
        for chunk in range(total):
            key = chunk_receipt_key(site_id, revision_id, total, chunk)
            try:
                data = self.deps.blobs.get(key)
            except NotFound:
                raise RuntimeError(f"chunk {chunk} marked done but its receipt is missing") from None
            routes = json.loads(data)["routes"]
            planned = [r.path for r in plan.chunk(chunk)] if inline else None
            if len(routes) != plan.chunk_size(chunk) or (
                planned is not None and [e["route"] for e in routes] != planned
            ):
                raise RuntimeError(f"chunk {chunk}'s receipt does not cover its planned routes")
            if inline:
                entries.extend(routes)
            else:
                size = sum(int(e["size"]) for e in routes)
                parts.append(
                    {
                        "chunk": chunk,
                        "key": key,
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "routes": len(routes),
                        "bytes": size,
                    }
                )
        if inline:
            return self._receipt(publication, entries)
        return {
            "site_id": site_id,
            "revision_id": revision_id,
            "route_count": sum(int(str(p["routes"])) for p in parts),
            "bytes": sum(int(str(p["bytes"])) for p in parts),
            "chunks": parts,
        }

    def _finished_already(self, publication: Publication, site: Site | None) -> Result:
        """A step of a finished publication (a duplicate, or a redelivery after its finisher stopped between the
        promotion and live.json): if it is live, make sure of the document (conditional on its ETag, a no-op when
        it is current)."""
        if site is not None and _is_live(site, publication):
            write_live_document(self.deps.blobs, site)
        return Result(Outcome.ACKED, f"already_{publication.status.value}")

    def _finish(self, publication: Publication, before: Site, receipt: dict[str, object]) -> Result:
        """Every route is stored: receipt (only now, naming every route), then promotion, then live.json.
        `before` is the site as read when this step began."""
        d = self.deps
        site_id, revision_id = publication.site_id, publication.revision_id
        d.blobs.put_if_absent(receipt_key(site_id, revision_id), canonical(receipt))
        now = d.clock.now()
        live = publication_live(before, publication.seq, revision_id, receipt_key(site_id, revision_id), now)
        promoted = d.publications.publish(site_id, publication.seq, revision_id, now, live)  # pointer, status, event
        if promoted:  # the pointer is ours: no need to read it back
            site: Site | None = replace(before, live_seq=publication.seq, live_revision=revision_id, live_at=now)
        else:
            # A refused promotion is a newer publication's win, unless the pointer already names this one (an
            # earlier promotion of it whose reply was lost, or a finisher that stopped after it): then it is
            # published. Recorded either way (a no-op if it was).
            site = d.sites.get(site_id)
            promoted = site is not None and _is_live(site, publication)
            status = PublicationStatus.PUBLISHED if promoted else PublicationStatus.SUPERSEDED
            d.publications.finish(site_id, publication.seq, status, now)
        if site is not None:
            write_live_document(d.blobs, site, previous=before)
        obs.count(obs.Metric.PublicationPromoted if promoted else obs.Metric.PublicationSuperseded)
        if promoted:
            obs.seconds(obs.Metric.PublicationLatency, now - publication.created_at)
        obs.logger.info("publication finished", extra={"promoted": promoted, "routes": receipt["route_count"]})
        return Result(Outcome.SUCCEEDED, "promoted" if promoted else "superseded")


def _label(message: PublicationMessage) -> str:
    return "plan" if message.step == "plan" else f"chunk {message.chunk}"


def _stored(blobs: BlobStore, key: str) -> bytes | None:
    try:
        return blobs.get(key)
    except NotFound:
        return None


def _is_live(site: Site, publication: Publication) -> bool:
    return site.live_seq == publication.seq and site.live_revision == publication.revision_id
