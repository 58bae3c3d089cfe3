"""`import`: a WXR file from S3, streamed, merged into the head revision by guid; re-import changes nothing."""

from __future__ import annotations

from ..context import HandlerContext
from ..errors import PermanentError
from ..schemas import ImportInput
from ..wordpress.merge import ManifestMerger
from ..wordpress.store import BodyWriter
from ..wordpress.wxr import HashingReader, parse_wxr
from . import Mutation

HEARTBEAT_EVERY_ITEMS = 100


def import_wxr(ctx: HandlerContext, payload: ImportInput) -> Mutation:
    head = ctx.head_manifest()
    if head is None:
        raise PermanentError(f"site {ctx.site.site_id} is not provisioned", code="not_provisioned")
    source = HashingReader(ctx.blobs.open(payload.source_key))
    with BodyWriter(ctx.content, known={p.body for p in head.posts}) as writer:
        merger = ManifestMerger(head, writer.write)
        for n, event in enumerate(parse_wxr(source), start=1):
            merger.add(event)
            if n % HEARTBEAT_EVERY_ITEMS == 0:
                ctx.heartbeat()
    source.read()  # anything after the closing tag still counts toward the digest
    tally = merger.tally
    if source.sha256.hexdigest() != payload.source_digest:
        raise PermanentError(f"{payload.source_key}: content does not match its digest", code="digest_mismatch")
    merged = merger.result()
    next_due_at = merger.next_due_at
    del merger  # its post index is no longer needed: only the merged bytes are
    revision_id = ctx.content.put_manifest_stream(merged.frame, merged.canonical_posts())
    return Mutation(revision_id=revision_id, summary={**tally.as_dict(), "bodies_written": writer.written,
                                                      "bytes": source.size, "totals": merged.counts},
                    next_due_at=next_due_at)
