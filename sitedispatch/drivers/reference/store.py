"""Reading and writing a site's content blobs: manifests (revisions), their pages and key indexes, and post bodies,
all immutable and content-addressed."""

from __future__ import annotations

import bisect
import hashlib
import json
import struct
import sys
import threading
import zlib
from array import array
from collections.abc import Container, Iterable, Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from sitedispatch.concurrency import pool
from sitedispatch.domain.model import sha256_hex
from sitedispatch.domain.ports import BlobStore
from sitedispatch.drivers.reference import content
from sitedispatch.drivers.reference.content import (
    Manifest,
    PageRef,
    PostBody,
    PostRef,
    body_key,
    index_key,
    page_key,
    parse_gmt,
)
from sitedispatch.publication.live import snapshot_key

WRITE_CONCURRENCY = 8


def key_hash(guid: str, source_id: int) -> int:
    """A post's import identity (guid, WXR post id) as 64 bits: what the key index is sorted by."""
    digest = hashlib.blake2b(f"{guid}\0{source_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class KeyIndex:
    """Which post holds each import identity, for a paged revision: (key hash, post id) pairs sorted, 16 bytes a
    post (330,000 posts: 5.3 MB), so an import finds an item's post without reading the pages. Two identities may
    share a hash: `candidates` returns every id under it, and the caller checks the post itself."""

    def __init__(self, hashes: array[int] | None = None, ids: array[int] | None = None) -> None:
        self.hashes = hashes if hashes is not None else array("Q")
        self.ids = ids if ids is not None else array("q")
        self.added: dict[int, list[int]] = {}  # since the last `merged()`

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> KeyIndex:
        ordered = sorted(pairs)
        return cls(array("Q", (h for h, _ in ordered)), array("q", (i for _, i in ordered)))

    def candidates(self, key: int) -> list[int]:
        at, end = bisect.bisect_left(self.hashes, key), bisect.bisect_right(self.hashes, key)
        return list(self.ids[at:end]) + self.added.get(key, [])

    def add(self, key: int, post_id: int) -> None:
        self.added.setdefault(key, []).append(post_id)

    @property
    def changed(self) -> bool:
        return bool(self.added)

    def merged(self) -> KeyIndex:
        """The index with what was added folded in (one pass over both, in order)."""
        if not self.added:
            return self
        new = sorted((h, i) for h, ids in self.added.items() for i in ids)
        hashes, ids = array("Q"), array("q")
        at = 0
        for h, i in new:
            stop = bisect.bisect_left(self.hashes, h, at)
            while stop < len(self.hashes) and self.hashes[stop] == h and self.ids[stop] < i:
                stop += 1  # equal hashes in id order, as `of` sorts them: the same pairs, the same bytes
            hashes.extend(self.hashes[at:stop])
            ids.extend(self.ids[at:stop])
            hashes.append(h)
            ids.append(i)
            at = stop
        hashes.extend(self.hashes[at:])
        ids.extend(self.ids[at:])
        return KeyIndex(hashes, ids)

    def to_bytes(self) -> bytes:
        merged = self.merged()
        return zlib.compress(
            struct.pack("<Q", len(merged.hashes)) + little_endian(merged.hashes) + little_endian(merged.ids), 6
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyIndex:
        raw = zlib.decompress(data)
        (n,) = struct.unpack_from("<Q", raw)
        return cls(from_little_endian("Q", raw[8 : 8 + 8 * n]), from_little_endian("q", raw[8 + 8 * n : 8 + 16 * n]))


def little_endian(values: array[int]) -> bytes:
    """An integer array's bytes, little-endian whatever the machine (stored blobs and checkpoints)."""
    if sys.byteorder == "little":
        return values.tobytes()
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped.tobytes()


def from_little_endian(typecode: str, data: bytes) -> array[int]:
    values = array(typecode)
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values


# One page in memory: each post's canonical bytes by id (a PostRef is built only for a post an import touches).
Page = dict[int, bytes]


def page_bytes(page: Page) -> bytes:
    return b"[" + b",".join(page[n] for n in sorted(page)) + b"]"


def page_ref(number: int, page: Page, digest: str) -> PageRef:
    types: dict[str, int] = {}
    comments, due = 0, None
    for data in page.values():
        post = json.loads(data)
        types[post["type"]] = types.get(post["type"], 0) + 1
        comments += int(post["comment_count"])
        if post["status"] == "future":
            at = parse_gmt(post["date_gmt"])
            due = at if due is None else min(due, at)
    return PageRef(number=number, digest=digest, count=len(page), types=types, comments=comments, next_due_at=due)


def paged(posts: Iterable[PostRef]) -> dict[int, Page]:
    pages: dict[int, Page] = {}
    for post in posts:
        pages.setdefault(post.id // content.PAGE_IDS, {})[post.id] = post.canonical_bytes()
    return pages


class ContentStore:
    def __init__(self, blobs: BlobStore, site_id: str) -> None:
        self.blobs = blobs
        self.site_id = site_id

    def stored_manifest(self, revision_id: str) -> Manifest:
        """A revision as stored: for a paged one, without its posts (they are in its pages)."""
        return Manifest.from_bytes(self.blobs.get(snapshot_key(self.site_id, revision_id)))

    def manifest(self, revision_id: str) -> Manifest:
        """A revision with all its posts (a paged one's read from its pages)."""
        return self.with_posts(self.stored_manifest(revision_id))

    def with_posts(self, frame: Manifest) -> Manifest:
        """A stored revision's document with its posts (a paged one's read from its pages)."""
        if not frame.paged:
            return frame
        posts = [PostRef.model_validate_json(data) for ref in frame.pages for data in _posts_of(self.page(ref))]
        return frame.model_copy(update={"posts": tuple(posts), "pages": (), "index": None})

    def page(self, ref: PageRef) -> Page:
        return {
            int(post["id"]): _canonical(post) for post in json.loads(self.blobs.get(page_key(self.site_id, ref.digest)))
        }

    def put_page(self, number: int, page: Page, known: Container[str] = ()) -> PageRef:
        data = page_bytes(page)
        digest = sha256_hex(data)
        if digest not in known:
            self.blobs.put_if_absent(page_key(self.site_id, digest), data)
        return page_ref(number, page, digest)

    def key_index(self, frame: Manifest) -> KeyIndex:
        if frame.index is None:
            return KeyIndex()
        return KeyIndex.from_bytes(self.blobs.get(index_key(self.site_id, frame.index)))

    def put_key_index(self, index: KeyIndex) -> str:
        data = index.to_bytes()
        digest = sha256_hex(data)
        self.blobs.put_if_absent(index_key(self.site_id, digest), data)
        return digest

    def put_frame(self, frame: Manifest) -> str:
        data = frame.canonical_bytes()  # serialized once: the bytes name the revision and are what is stored
        revision_id = sha256_hex(data)
        self.blobs.put_if_absent(snapshot_key(self.site_id, revision_id), data)
        return revision_id

    def put_manifest(self, manifest: Manifest, reuse: Iterable[PageRef] = ()) -> str:
        """A revision with its posts in the document, or past `FLAT_MAX_POSTS` in pages (a page whose digest is
        among `reuse`, the pages of a revision already stored, is not written again)."""
        if len(manifest.posts) <= content.FLAT_MAX_POSTS:
            return self.put_frame(manifest)
        known = {ref.digest for ref in reuse}
        pages = paged(manifest.posts)
        refs = tuple(self.put_page(n, pages[n], known) for n in sorted(pages))
        index = KeyIndex.of((key_hash(p.guid, p.source_id), p.id) for p in manifest.posts)
        return self.put_frame(
            manifest.model_copy(update={"posts": (), "pages": refs, "index": self.put_key_index(index)})
        )

    def body(self, digest: str) -> PostBody:
        return PostBody.model_validate_json(self.blobs.get(body_key(self.site_id, digest)))

    def put_body(self, body: PostBody) -> str:
        digest = body.digest
        self.blobs.put_if_absent(body_key(self.site_id, digest), body.canonical_bytes())
        return digest


def _canonical(post: dict[str, Any]) -> bytes:
    """A stored post's canonical bytes from its parsed JSON (stored bytes are canonical: dumped the same way, the
    same bytes), without building a PostRef."""
    return json.dumps(post, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _posts_of(page: Page) -> Iterator[bytes]:
    return (page[n] for n in sorted(page))


class BodyWriter:
    """Writes post bodies concurrently with a bounded number in flight, so memory stays bounded on huge imports.

    Bodies whose digest is already known (present in the head revision) are not written again.
    """

    def __init__(
        self, store: ContentStore, known: set[str] | None = None, concurrency: int = WRITE_CONCURRENCY
    ) -> None:
        self.store = store
        self.known = set(known or ())
        self.pool = pool(concurrency, "body-writer")
        self.slots = threading.BoundedSemaphore(concurrency * 2)
        self.pending: list[Future[str]] = []
        self.written = 0

    def __enter__(self) -> BodyWriter:
        return self

    def write(self, body: PostBody) -> str:
        digest = body.digest
        if digest in self.known:
            return digest
        self.known.add(digest)
        self.slots.acquire()
        future = self.pool.submit(self.store.put_body, body)
        future.add_done_callback(lambda _: self.slots.release())
        self.pending.append(future)
        if len(self.pending) > 256:
            self._drain(keep=64)
        self.written += 1
        return digest

    def flush(self) -> None:
        """Every body handed in so far is stored (before a checkpoint names a revision that refers to them); the
        digests remembered against writing a body twice are forgotten, so they take what a step wrote, no more."""
        self._drain()
        self.known.clear()

    def _drain(self, keep: int = 0) -> None:
        while len(self.pending) > keep:
            self.pending.pop(0).result()  # re-raises a failed write

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is None:
                self._drain()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=exc is not None)
