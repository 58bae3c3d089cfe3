"""The kind -> handler map: the one extension point. A new kind is a schema, a handler and a line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..context import HandlerContext
from ..model import Kind
from ..wordpress.content import Manifest
from ..wordpress.store import ContentStore


@dataclass(frozen=True)
class Mutation:
    """A handler's result: the site's next content (bodies already written) as a Manifest to store, or as the id of
    a manifest the handler already streamed to storage; a summary recorded with the commit; and which revision to
    publish after the commit (default: the new head)."""

    manifest: Manifest | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    publish_revision: str | None = None
    publish: bool = True  # False: nothing visible changed, so no publication follows the commit
    revision_id: str | None = None  # set when the handler stored the manifest itself (huge sites)
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


def handler_map() -> dict[Kind, HandlerFn]:
    from .importer import import_wxr
    from .provision import provision
    from .publish import publish
    from .recover import recover
    from .wp_cron import wp_cron

    return {Kind.PROVISION: provision, Kind.IMPORT: import_wxr, Kind.PUBLISH: publish, Kind.WP_CRON: wp_cron,
            Kind.RECOVER: recover}
