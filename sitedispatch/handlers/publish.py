"""`publish`: publish the head revision as it is (content unchanged, a new publication sequence)."""

from __future__ import annotations

from ..context import HandlerContext
from ..errors import PermanentError
from ..schemas import PublishInput
from . import Mutation


def publish(ctx: HandlerContext, payload: PublishInput) -> Mutation:
    head = ctx.head_manifest()
    if head is None:
        raise PermanentError(f"site {ctx.site.site_id} has no content to publish", code="not_provisioned")
    return Mutation(manifest=head, summary={"published": head.revision_id})
