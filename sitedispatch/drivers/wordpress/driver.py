"""The wordpress driver: a real WordPress over HTTP(S), its content in WordPress's database.

A revision of a WordPress site is a snapshot document naming what the mu-plugin reports (WordPress version,
permalinks, a digest of everything pages render from): equal digests, equal revision. Its publication is a crawl of
the origin into the revision's immutable objects, with the same receipts and monotonic promotion as the reference
driver. Every write (REST, and due events through the mu-plugin's REST route) carries the lease's fence; the
mu-plugin refuses a stale one (409), which the worker treats as a lost lease: nothing is committed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sitedispatch.domain.errors import InvalidInput, NotFound, PermanentError
from sitedispatch.domain.model import ENDPOINT_PATTERN, WORDPRESS_DRIVER, Site, SiteConnection, sha256_hex
from sitedispatch.domain.ports import BlobStore
from sitedispatch.domain.schemas import ImportInput, ProvisionInput, PublishInput, RecoverInput, WpCronInput
from sitedispatch.drivers.wordpress.crawl import CrawledRoutes
from sitedispatch.drivers.wordpress.credentials import Credentials, check_reference
from sitedispatch.drivers.wordpress.origin import MU_PLUGIN, WordPressOrigin
from sitedispatch.drivers.wordpress.rest_import import RestImporter
from sitedispatch.kinds.contract import HandlerContext, Mutation
from sitedispatch.kinds.import_steps import ImportCheckpoint, Steps, store_state
from sitedispatch.publication.live import canonical, snapshot_key
from sitedispatch.publication.sources import RouteSource
from sitedispatch.wxr import WxrPosition

REQUIRED_CAPABILITIES = (
    "edit_posts",
    "publish_posts",
    "edit_pages",
    "publish_pages",
    "manage_categories",
    "moderate_comments",
)
HEARTBEAT_EVERY_ITEMS = 20
IMPORT_WORKERS = 4


class WordPressDriver:
    destination_failures = frozenset(
        {"wordpress_unauthorized", "credential_invalid", "credential_missing", "mu_plugin_missing"}
    )

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def connection(self, given: SiteConnection) -> SiteConnection:
        """A WordPress site needs its home URL and a reference to its credential (never the credential)."""
        if not given.endpoint or not ENDPOINT_PATTERN.fullmatch(given.endpoint):
            raise InvalidInput("a WordPress site needs its url: http(s)://host[:port][/path]", field="url")
        if not given.credential_ref:
            raise InvalidInput(
                "a WordPress site needs a credential: file:///path.json or a Secrets Manager secret", field="credential"
            )
        check_reference(given.credential_ref)
        return replace(given, endpoint=given.endpoint.rstrip("/"))

    def origin(self, site: Site, fence: int | None = None, public: bool = False) -> WordPressOrigin:
        """The site's origin; `public`: its pages only, as a visitor (a crawl needs no credential)."""
        connection = site.connection
        if not connection.endpoint or not (public or connection.credential_ref):
            raise PermanentError(
                f"site {site.site_id} is a WordPress site without an endpoint and a credential",
                code="site_misconfigured",
            )
        credential = None if public else self.credentials.get(str(connection.credential_ref))
        return WordPressOrigin(connection.endpoint, credential, fence)

    # -- kinds ---------------------------------------------------------------------------------------------------

    def provision(self, ctx: HandlerContext, payload: ProvisionInput) -> Mutation:
        """Verify the site (the mu-plugin answers, the credential's user may do what the kinds need), record its
        version and permalinks, and take the first publication. WordPress itself is installed by its owner."""
        origin = self.origin(ctx.site, ctx.fence)
        info = origin.info()
        me = origin.rest("GET", "/wp/v2/users/me", query={"context": "edit"})
        capabilities = me.get("capabilities") or {}
        lacking = [c for c in REQUIRED_CAPABILITIES if not capabilities.get(c)]
        if lacking:
            raise PermanentError(
                f"WordPress user {me.get('username', me.get('id'))} lacks {', '.join(lacking)}",
                code="wordpress_unauthorized",
            )
        if not info.get("permalink_structure"):
            raise PermanentError(
                "the site uses plain permalinks (?p=N): set a permalink structure so routes have paths to publish",
                code="plain_permalinks",
            )
        return self._snapshot(ctx, info, {"verified_user": me.get("username"), "requests": origin.requests})

    def import_wxr(self, ctx: HandlerContext, payload: ImportInput) -> Mutation:
        """The file's items created through WordPress's REST API, each keyed by its source (what WordPress already
        holds is asked first, so nothing is created twice). In steps (kinds/import_steps.py): after each, every
        item fed is created and a checkpoint records the file's position; the next invocation, or the next attempt
        after a crash, reads on from there (onto whatever the site holds: the keys make that safe)."""
        origin = self.origin(ctx.site, ctx.fence)
        at = ImportCheckpoint.of(ctx.operation.checkpoint, payload.source_digest, None)
        steps = Steps(ctx, payload.source_key, at, HEARTBEAT_EVERY_ITEMS)
        imported = {str(k): int(v) for k, v in origin.info()["imported"].items()}
        with RestImporter(origin, imported, ctx.heartbeat, workers=IMPORT_WORKERS) as importer:
            if at is not None:
                importer.restore(json.loads(ctx.blobs.get(at.state_key)))

            def checkpoint(position: WxrPosition) -> None:
                importer.settle()
                key = store_state(ctx.blobs, ctx.site.site_id, importer.state())
                steps.record(payload.source_digest, None, position, None, key, importer.items, payload.source_bytes)

            for event in steps.events(checkpoint):
                importer.add(event)
            tally = importer.finish()
        source = steps.source
        source.read()
        if source.sha256.hexdigest() != payload.source_digest:
            raise PermanentError(f"{payload.source_key}: content does not match its digest", code="digest_mismatch")
        summary = {
            **tally.as_dict(),
            "bytes": source.size,
            "steps": steps.total,
            "resumed_from_step": steps.resumed_from,
        }
        return self._snapshot(ctx, origin.info(), summary)

    def publish(self, ctx: HandlerContext, payload: PublishInput) -> Mutation:
        return self._snapshot(ctx, self.origin(ctx.site, ctx.fence).info(), {})

    def wp_cron(self, ctx: HandlerContext, payload: WpCronInput) -> Mutation:
        """Run the site's due events now (authenticated and fenced); publish if that changed what pages show."""
        origin = self.origin(ctx.site, ctx.fence)
        origin.run_cron()
        after = origin.info()  # one read: what changed is measured against the head's snapshot, not a second read
        changed = after["content_version"] != self._head_document(ctx).get("content_version")
        mutation = self._snapshot(ctx, after, {"content_changed": changed})
        return Mutation(
            revision_id=mutation.revision_id,
            summary=mutation.summary,
            publish=changed,
            next_due_at=mutation.next_due_at,
        )

    def recover(self, ctx: HandlerContext, payload: RecoverInput) -> Mutation:
        """Roll back: an earlier crawled revision goes live again (its objects are immutable and kept). Restoring
        WordPress's database from a revision is not something a crawl can do: refused."""
        if payload.mode == "restore":
            raise PermanentError(
                "a WordPress site's content lives in its database: restore it there, then publish; "
                "`recover --mode rollback` puts an earlier publication back live",
                code="restore_unsupported",
            )
        try:
            ctx.blobs.get(snapshot_key(ctx.site.site_id, payload.revision_id))
        except NotFound:
            raise PermanentError(
                f"site {ctx.site.site_id} has no revision {payload.revision_id}", code="unknown_revision"
            ) from None
        head = ctx.site.head_revision
        assert head is not None  # the handler checked the site is provisioned
        return Mutation(
            revision_id=head,
            publish_revision=payload.revision_id,
            summary={"rolled_back_to": payload.revision_id},
            next_due_at=ctx.site.next_due_at,
        )

    def route_source(self, blobs: BlobStore, site: Site, revision_id: str) -> RouteSource:
        return CrawledRoutes(self.origin(site, public=True), blobs, site.site_id, revision_id)

    # -- revisions -------------------------------------------------------------------------------------------------

    def _snapshot(self, ctx: HandlerContext, info: dict[str, Any], summary: dict[str, Any]) -> Mutation:
        document = {
            "driver": WORDPRESS_DRIVER,
            "site_id": ctx.site.site_id,
            "home": info["home"],
            "wordpress_version": info["wordpress_version"],
            "permalink_structure": info["permalink_structure"],
            "content_version": info["content_version"],
            "counts": info["counts"],
        }
        data = canonical(document)
        revision_id = sha256_hex(data)
        ctx.blobs.put_if_absent(snapshot_key(ctx.site.site_id, revision_id), data)
        next_due = info.get("next_due")
        return Mutation(
            revision_id=revision_id,
            next_due_at=float(next_due) if next_due is not None else None,
            summary={
                **summary,
                "wordpress_version": info["wordpress_version"],
                "counts": info["counts"],
                "due_events": info["due_events"],
            },
        )

    @staticmethod
    def _head_document(ctx: HandlerContext) -> dict[str, Any]:
        head = ctx.site.head_revision
        if head is None:
            return {}
        return dict(json.loads(ctx.blobs.get(snapshot_key(ctx.site.site_id, head))))


__all__ = ["MU_PLUGIN", "WordPressDriver"]
