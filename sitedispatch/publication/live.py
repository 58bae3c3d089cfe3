"""Where a site's revisions, receipts and live pointer are kept, and how readers find the live revision."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from sitedispatch.domain.errors import NotFound
from sitedispatch.domain.model import Site
from sitedispatch.domain.ports import BlobStore, SiteStore
from sitedispatch.publication.routes import normalise_route, route_key

CAS_ATTEMPTS = 8


def snapshot_key(site_id: str, revision_id: str) -> str:
    """A revision's own document, written by its driver (a reference manifest, a WordPress snapshot)."""
    return f"sites/{site_id}/snapshots/{revision_id}.json"


def revision_prefix(site_id: str, revision_id: str) -> str:
    return f"sites/{site_id}/revisions/{revision_id}/"


def object_key(site_id: str, revision_id: str, route: str) -> str:
    return revision_prefix(site_id, revision_id) + route_key(normalise_route(route))


def chunk_receipt_key(site_id: str, revision_id: str, total: int, chunk: int) -> str:
    return f"{revision_prefix(site_id, revision_id)}_chunks/{total}-{chunk}.json"


def chunk_part_key(chunk_receipt: str, start: int, end: int) -> str:
    """A continued chunk's part: the receipt entries of its routes `start` to `end` (end excluded)."""
    return f"{chunk_receipt.removesuffix('.json')}.{start}-{end}.json"


def receipt_key(site_id: str, revision_id: str) -> str:
    return f"sites/{site_id}/receipts/{revision_id}.json"


def receipt_routes(blobs: BlobStore, receipt: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every route a receipt describes: listed in it, or (a publication past the inline limit) in the chunk
    receipts it names."""
    if "routes" in receipt:
        yield from receipt["routes"]
        return
    for part in receipt["chunks"]:
        yield from json.loads(blobs.get(part["key"]))["routes"]


def live_key(site_id: str) -> str:
    return f"sites/{site_id}/live.json"


def canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def live_document(site_id: str, seq: int, revision_id: str) -> bytes:
    return canonical(
        {
            "site_id": site_id,
            "revision_id": revision_id,
            "seq": seq,
            "receipt": receipt_key(site_id, revision_id),
            "prefix": revision_prefix(site_id, revision_id),
        }
    )


def expected_etag(document: bytes) -> str:
    """The ETag S3 gives a single-part PUT of these bytes, unencrypted or SSE-S3 (the bucket's): their MD5."""
    return '"' + hashlib.md5(document, usedforsecurity=False).hexdigest() + '"'


def write_live_document(blobs: BlobStore, site: Site, previous: Site | None = None) -> bool:
    """Make live.json say what the site's live pointer says, never moving it backwards (compare-and-swap on the
    object's ETag). True when live.json is at least as new as `site` afterwards.

    `previous`, the site as it was before this promotion, names the document live.json should hold now; its ETag
    is computed, not read, so the usual case is one conditional PUT. Anything else (a finisher that has not written
    yet, a newer one that has) fails that condition and falls back to read-compare-swap."""
    if site.live_revision is None:
        return False
    key = live_key(site.site_id)
    document = live_document(site.site_id, site.live_seq, site.live_revision)
    if previous is not None:
        before = (
            expected_etag(live_document(previous.site_id, previous.live_seq, previous.live_revision))
            if previous.live_revision is not None
            else None
        )
        if blobs.replace(key, document, before):
            return True
    for _ in range(CAS_ATTEMPTS):
        current = blobs.read_versioned(key)
        if current is not None and json.loads(current[0]).get("seq", 0) >= site.live_seq:
            return True
        if blobs.replace(key, document, current[1] if current else None):
            return True
    return False


def read_live_route(sites: SiteStore, blobs: BlobStore, site_id: str, route: str) -> tuple[bytes, Site]:
    """The bytes of `route` in the site's live revision (NotFound if the site, its publication or the route is
    missing)."""
    site = sites.get(site_id)
    if site is None:
        raise NotFound(f"site {site_id} not found")
    if site.live_revision is None:
        raise NotFound(f"site {site_id} has no live publication yet")
    try:
        return blobs.get(object_key(site_id, site.live_revision, route)), site
    except NotFound:
        raise NotFound(
            f"route {normalise_route(route)} is not in {site_id}'s live revision {site.live_revision[:12]}"
        ) from None
