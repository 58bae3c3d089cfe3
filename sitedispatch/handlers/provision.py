"""`provision`: a new site with WordPress's defaults, recorded as commit 1."""

from __future__ import annotations

from ..context import HandlerContext
from ..errors import PermanentError
from ..schemas import ProvisionInput
from ..wordpress.content import default_site
from . import Mutation


def provision(ctx: HandlerContext, payload: ProvisionInput) -> Mutation:
    if ctx.site.head_version > 0:
        raise PermanentError(f"site {ctx.site.site_id} is already provisioned (head version "
                             f"{ctx.site.head_version})", code="already_provisioned")
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
        ctx.content.put_body(body)
    return Mutation(manifest=manifest, summary={"created": manifest.counts()})
