"""The kind -> handler map: the one extension point. A new kind is a schema, a handler and a line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..context import HandlerContext
from ..model import Kind
from ..wordpress.content import Manifest


@dataclass(frozen=True)
class Mutation:
    """A handler's result: the site's next content (bodies already written), a summary recorded with the commit,
    and which revision to publish after the commit (default: the new head)."""

    manifest: Manifest
    summary: dict[str, Any] = field(default_factory=dict)
    publish_revision: str | None = None
    publish: bool = True  # False: nothing visible changed, so no publication follows the commit


HandlerFn = Callable[[HandlerContext, Any], Mutation]


def handler_map() -> dict[Kind, HandlerFn]:
    from .importer import import_wxr
    from .provision import provision
    from .publish import publish
    from .recover import recover
    from .wp_cron import wp_cron

    return {Kind.PROVISION: provision, Kind.IMPORT: import_wxr, Kind.PUBLISH: publish, Kind.WP_CRON: wp_cron,
            Kind.RECOVER: recover}
