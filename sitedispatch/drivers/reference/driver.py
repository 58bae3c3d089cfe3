"""The reference driver: sites held entirely in this system's content store (manifests and bodies in S3), rendered
from templates. Every kind is a pure function of the head revision and the input."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from sitedispatch.domain.errors import InvalidInput, NotFound, PermanentError
from sitedispatch.domain.model import REFERENCE_DRIVER, Site, SiteConnection
from sitedispatch.domain.ports import BlobStore
from sitedispatch.domain.schemas import ImportInput, ProvisionInput, PublishInput, RecoverInput, WpCronInput
from sitedispatch.drivers.reference.content import Manifest, PageRef, PostRef, ScheduledEvent, default_site, gmt
from sitedispatch.drivers.reference.merge import ManifestMerger
from sitedispatch.drivers.reference.source import route_source
from sitedispatch.drivers.reference.store import BodyWriter, ContentStore
from sitedispatch.kinds.contract import HandlerContext, Mutation, SiteDriver
from sitedispatch.kinds.import_steps import ImportCheckpoint, Steps, store_state
from sitedispatch.publication.sources import RouteSource
from sitedispatch.wxr import WxrPosition

HEARTBEAT_EVERY_ITEMS = 100
RECURRENCE_S = {"hourly": 3600, "twicedaily": 43200, "daily": 86400, "weekly": 604800}


def _content(ctx: HandlerContext) -> ContentStore:
    return ContentStore(ctx.blobs, ctx.site.site_id)


def _head(ctx: HandlerContext) -> Manifest:
    """The head revision as stored (a paged one without its posts)."""
    assert ctx.site.head_revision is not None  # the handler checked the site is provisioned
    return _content(ctx).stored_manifest(ctx.site.head_revision)


def _unchanged(ctx: HandlerContext, head: Manifest, summary: dict[str, Any], **after: Any) -> Mutation:
    """The head as it is: already stored under the site's head revision, so nothing is serialized or written again."""
    assert ctx.site.head_revision is not None  # the handler checked the site is provisioned
    return Mutation(revision_id=ctx.site.head_revision, summary=summary, next_due_at=head.next_due_at(), **after)


def _stored(ctx: HandlerContext, manifest: Manifest, summary: dict[str, Any], **after: Any) -> Mutation:
    """The manifest as the site's next revision: stored (content-addressed, so storing it again is a no-op)."""
    return Mutation(
        revision_id=_content(ctx).put_manifest(manifest), summary=summary, next_due_at=manifest.next_due_at(), **after
    )


def _checkpoint(
    ctx: HandlerContext,
    payload: ImportInput,
    steps: Steps,
    writer: BodyWriter,
    merger: ManifestMerger,
    position: WxrPosition,
) -> None:
    """The merge so far stored (its bodies first, then its manifest and state), then the checkpoint naming them,
    under the attempt's fence; out of time, the invocation hands the attempt over here (ContinueLater)."""
    writer.flush()
    stored = merger.store()
    key = store_state(ctx.blobs, ctx.site.site_id, merger.state())
    steps.record(
        payload.source_digest,
        ctx.site.head_revision,
        position,
        stored.revision_id,
        key,
        merger.tally.items,
        payload.source_bytes,
    )


def _run_events(events: tuple[ScheduledEvent, ...], as_of: int) -> tuple[tuple[ScheduledEvent, ...], list[str]]:
    """The events left after those due at `as_of` ran (a recurring one moved past it), and the hooks that ran."""
    ran: list[str] = []
    left: list[ScheduledEvent] = []
    for event in events:
        if event.timestamp > as_of:
            left.append(event)
            continue
        ran.append(event.hook)
        interval = RECURRENCE_S.get(event.recurrence or "")
        if interval:  # recurring: next run after now; one-off: done
            missed = (as_of - event.timestamp) // interval + 1
            left.append(event.model_copy(update={"timestamp": event.timestamp + missed * interval}))
    return tuple(left), ran


def _publish_due_pages(
    content: ContentStore, frame: Manifest, as_of: int, now: str
) -> tuple[tuple[PageRef, ...], list[int]]:
    """A paged revision's pages with their due `future` posts published: only pages due by `as_of` are read."""
    pages, published = [], []
    for ref in frame.pages:
        if ref.next_due_at is None or ref.next_due_at > as_of:
            pages.append(ref)
            continue
        page = content.page(ref)
        for post_id in sorted(page):
            post = json.loads(page[post_id])
            if post["status"] == "future" and post["date_gmt"] <= now:
                post["status"] = "publish"
                page[post_id] = PostRef.model_validate(post).canonical_bytes()
                published.append(post_id)
        pages.append(content.put_page(ref.number, page))
    return tuple(pages), published


class ReferenceDriver:
    destination_failures: frozenset[str] = frozenset()  # its content is in this deployment's own bucket

    def connection(self, given: SiteConnection) -> SiteConnection:
        """A reference site is reached through the bucket alone."""
        if given.endpoint or given.credential_ref:
            raise InvalidInput("a reference site has no url or credential", field="driver")
        return given

    def provision(self, ctx: HandlerContext, payload: ProvisionInput) -> Mutation:
        """A new site with WordPress's defaults, recorded as commit 1."""
        if ctx.settings.reference_latency_s:
            ctx.work_for(ctx.settings.reference_latency_s)
        manifest, bodies = default_site(
            ctx.site.site_id,
            title=payload.title,
            url=payload.url or f"https://{ctx.site.site_id}.example",
            admin_email=payload.admin_email,
            admin_login=payload.admin_login,
            locale=payload.locale,
            timezone=payload.timezone,
            created_at=ctx.operation.created_at,
        )
        for body in bodies:
            _content(ctx).put_body(body)
        return _stored(ctx, manifest, {"created": manifest.counts()})

    def import_wxr(self, ctx: HandlerContext, payload: ImportInput) -> Mutation:
        """A WXR file from S3, streamed, merged into the head revision by guid; re-import changes nothing. In
        steps (kinds/import_steps.py): after each, a checkpoint; the next invocation, or the next attempt after a
        crash, continues from the last one."""
        at = ImportCheckpoint.of(ctx.operation.checkpoint, payload.source_digest, ctx.site.head_revision)
        base = ctx.site.head_revision if at is None or at.revision is None else at.revision
        assert base is not None  # the handler checked the site is provisioned
        content = _content(ctx)
        steps = Steps(ctx, payload.source_key, at, HEARTBEAT_EVERY_ITEMS)
        with BodyWriter(content) as writer:
            merger = ManifestMerger(content, content.stored_manifest(base), writer.write)
            if at is not None:
                merger.restore(json.loads(ctx.blobs.get(at.state_key)))
            for event in steps.events(partial(_checkpoint, ctx, payload, steps, writer, merger)):
                merger.add(event)
        source = steps.source
        source.read()  # anything after the closing tag still counts toward the digest
        tally = merger.tally
        if source.sha256.hexdigest() != payload.source_digest:
            raise PermanentError(f"{payload.source_key}: content does not match its digest", code="digest_mismatch")
        stored = merger.result()
        return Mutation(
            revision_id=stored.revision_id,
            summary={
                **tally.as_dict(),
                "bodies_written": writer.written,
                "bytes": source.size,
                "totals": stored.manifest.counts(),
                "steps": steps.total,
                # the step this invocation began from (0: the first item): after a continuation or a crash, > 0
                "resumed_from_step": steps.resumed_from,
            },
            next_due_at=stored.manifest.next_due_at(),
        )

    def publish(self, ctx: HandlerContext, payload: PublishInput) -> Mutation:
        """The head revision as it is (content unchanged, a new publication sequence)."""
        head = _head(ctx)
        return _unchanged(ctx, head, {"published": ctx.site.head_revision})

    def wp_cron(self, ctx: HandlerContext, payload: WpCronInput) -> Mutation:
        """Due events run and scheduled (`future`) posts whose date has passed are published, as WordPress's cron. A
        site in pages reads only the pages with a post due (each page names its earliest)."""
        frame = _head(ctx)
        as_of = payload.due_minute * 60 if payload.due_minute is not None else int(ctx.operation.created_at)
        now = gmt(as_of)
        events, ran = _run_events(frame.events, as_of)
        summary: dict[str, Any] = {"as_of": now, "ran_events": ran}
        if frame.paged:
            pages, published = _publish_due_pages(_content(ctx), frame, as_of, now)
            manifest = frame.model_copy(update={"pages": pages, "events": events}).normalised()
            return Mutation(
                revision_id=_content(ctx).put_frame(manifest),
                summary={**summary, "published_posts": published},
                next_due_at=manifest.next_due_at(),
                publish=bool(published or ran),
            )
        posts = []
        published = []
        for post in frame.posts:
            if post.status == "future" and post.date_gmt <= now:
                post = post.model_copy(update={"status": "publish"})
                published.append(post.id)
            posts.append(post)
        manifest = frame.model_copy(update={"posts": tuple(posts), "events": events}).normalised()
        return _stored(
            ctx, manifest, {**summary, "published_posts": published}, publish=bool(published or ran)
        )  # events change only when some ran

    def recover(self, ctx: HandlerContext, payload: RecoverInput) -> Mutation:
        """Roll the live site back to an earlier revision, or restore the head's content from one."""
        head = _head(ctx)
        try:
            target = _content(ctx).stored_manifest(payload.revision_id)
        except NotFound:
            raise PermanentError(
                f"site {ctx.site.site_id} has no revision {payload.revision_id}", code="unknown_revision"
            ) from None
        if payload.mode == "restore":
            # Head content becomes the old revision (already stored under its id: nothing is written, a paged one's
            # pages are not read); it is then published under a new, higher sequence.
            return Mutation(
                revision_id=payload.revision_id,
                summary={"restored": payload.revision_id, "previous_head": ctx.site.head_revision},
                next_due_at=target.next_due_at(),
            )
        # Head stays; the old revision goes live again under a new sequence (live seq never decreases).
        return _unchanged(ctx, head, {"rolled_back_to": payload.revision_id}, publish_revision=payload.revision_id)

    def route_source(self, blobs: BlobStore, site: Site, revision_id: str) -> RouteSource:
        return route_source(ContentStore(blobs, site.site_id), revision_id)


def reference_only() -> dict[str, SiteDriver]:
    """The drivers of a deployment that has only reference sites (tests, benchmarks)."""
    return {REFERENCE_DRIVER: ReferenceDriver()}
