"""The kind -> handler map: the one extension point. A new kind is a schema, a handler and a line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..context import HandlerContext
from ..model import Kind
from ..wordpress.content import SiteContent


@dataclass(frozen=True)
class Mutation:
    """A handler's result: the site's next content and a summary recorded with the commit."""

    content: SiteContent
    summary: dict[str, Any] = field(default_factory=dict)


HandlerFn = Callable[[HandlerContext, Any], Mutation]


def handler_map() -> dict[Kind, HandlerFn]:
    from .provision import provision

    return {Kind.PROVISION: provision}
