"""`recover`: roll the live site back to an earlier revision, or restore the head's content from one."""

from __future__ import annotations

from ..context import HandlerContext
from ..errors import NotFound, PermanentError
from ..schemas import RecoverInput
from . import Mutation


def recover(ctx: HandlerContext, payload: RecoverInput) -> Mutation:
    head = ctx.head_manifest()
    if head is None:
        raise PermanentError(f"site {ctx.site.site_id} is not provisioned", code="not_provisioned")
    try:
        target = ctx.content.manifest(payload.revision_id)
    except NotFound:
        raise PermanentError(f"site {ctx.site.site_id} has no revision {payload.revision_id}",
                             code="unknown_revision") from None
    if payload.mode == "restore":
        # Head content becomes the old revision; it is then published under a new, higher sequence.
        return Mutation(manifest=target, summary={"restored": payload.revision_id, "previous_head": head.revision_id})
    # Head stays; the old revision goes live again under a new sequence (live seq never decreases).
    return Mutation(manifest=head, publish_revision=payload.revision_id,
                    summary={"rolled_back_to": payload.revision_id})
