"""The kind -> handler map: the one extension point. A new kind is a schema (`domain/schemas.py`), a `Kind` member,
a handler here and a method on the site driver port (`kinds/contract.py`), which each driver implements.

A handler checks what holds for every driver (a site is provisioned once, and before anything else) and hands the
work to the site's driver; there is no per-driver branch anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sitedispatch.domain.errors import PermanentError
from sitedispatch.domain.model import Kind
from sitedispatch.kinds.contract import HandlerContext, Mutation

HandlerFn = Callable[[HandlerContext, Any], Mutation]


def provision(ctx: HandlerContext, payload: Any) -> Mutation:
    if ctx.site.head_version > 0:
        raise PermanentError(
            f"site {ctx.site.site_id} is already provisioned (head version {ctx.site.head_version})",
            code="already_provisioned",
        )
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
    return {
        Kind.PROVISION: provision,
        Kind.IMPORT: _provisioned("import_wxr", "is not provisioned"),
        Kind.PUBLISH: _provisioned("publish", "has no content to publish"),
        Kind.WP_CRON: _provisioned("wp_cron", "is not provisioned"),
        Kind.RECOVER: _provisioned("recover", "is not provisioned"),
    }
