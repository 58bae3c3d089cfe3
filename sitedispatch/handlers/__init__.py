"""The kind -> handler map: the one extension point. A new kind is a schema, a handler here and a method on the
site driver port (`sitedispatch.drivers.SiteDriver`), which each driver implements for its kind of site.

A handler checks what holds for every driver (a site is provisioned once, and before anything else) and hands the
work to the site's driver; there is no per-driver branch anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..context import HandlerContext
from ..errors import PermanentError
from ..model import Kind
from ..wordpress.content import Manifest
from ..wordpress.store import ContentStore


@dataclass(frozen=True)
class Mutation:
    """A handler's result: the site's next content (bodies already written) as a Manifest to store, or as the id of
    a revision the driver already stored; a summary recorded with the commit; and which revision to publish after
    the commit (default: the new head)."""

    manifest: Manifest | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    publish_revision: str | None = None
    publish: bool = True  # False: nothing visible changed, so no publication follows the commit
    revision_id: str | None = None  # set when the driver stored the revision itself (huge sites, WordPress)
    next_due_at: float | None = None  # with `revision_id`: when WordPress's cron next has work (else from manifest)

    def due_at(self) -> float | None:
        return self.manifest.next_due_at() if self.manifest is not None else self.next_due_at

    def store(self, content: ContentStore) -> str:
        if self.revision_id is not None:
            return self.revision_id
        if self.manifest is None:
            raise ValueError("a mutation needs a manifest or the revision id of a stored one")
        return content.put_manifest(self.manifest)


HandlerFn = Callable[[HandlerContext, Any], Mutation]


def provision(ctx: HandlerContext, payload: Any) -> Mutation:
    if ctx.site.head_version > 0:
        raise PermanentError(f"site {ctx.site.site_id} is already provisioned (head version "
                             f"{ctx.site.head_version})", code="already_provisioned")
    return ctx.driver.provision(ctx, payload)


def _provisioned(method: str, missing: str) -> HandlerFn:
    def handle(ctx: HandlerContext, payload: Any) -> Mutation:
        if ctx.site.head_revision is None:
            raise PermanentError(f"site {ctx.site.site_id} {missing}", code="not_provisioned")
        result: Mutation = getattr(ctx.driver, method)(ctx, payload)
        return result

    handle.__name__ = method
    return handle


def handler_map() -> dict[Kind, HandlerFn]:
    return {Kind.PROVISION: provision,
            Kind.IMPORT: _provisioned("import_wxr", "is not provisioned"),
            Kind.PUBLISH: _provisioned("publish", "has no content to publish"),
            Kind.WP_CRON: _provisioned("wp_cron", "is not provisioned"),
            Kind.RECOVER: _provisioned("recover", "is not provisioned")}
