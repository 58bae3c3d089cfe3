"""Reading and writing a site's content blobs: manifests (revisions) and post bodies, all immutable."""

from __future__ import annotations

import codecs
import hashlib
import json
import tempfile
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import IO, Any

from sitedispatch.domain.model import sha256_hex
from sitedispatch.domain.ports import BlobStore
from sitedispatch.drivers.reference.content import Manifest, PostBody, body_key, canonical_frame
from sitedispatch.publication.live import snapshot_key

WRITE_CONCURRENCY = 8
SPOOL_IN_MEMORY_BYTES = 4 * 1024 * 1024


class ContentStore:
    def __init__(self, blobs: BlobStore, site_id: str) -> None:
        self.blobs = blobs
        self.site_id = site_id

    def manifest(self, revision_id: str) -> Manifest:
        return Manifest.from_bytes(self.blobs.get(snapshot_key(self.site_id, revision_id)))

    def manifest_stream(self, revision_id: str) -> StreamedManifest:
        """A revision read as a stream: its frame (everything but the posts) at once, its posts one at a time as
        they are read, each as its canonical JSON object (never the whole list, never a PostRef per post: 33,000
        posts as PostRefs take ~100 MB, as the merge's packed entries ~10 MB)."""
        return StreamedManifest(self.blobs.open(snapshot_key(self.site_id, revision_id)))

    def put_manifest(self, manifest: Manifest) -> str:
        data = manifest.canonical_bytes()  # serialized once: the bytes name the revision and are what is stored
        revision_id = sha256_hex(data)
        self.blobs.put_if_absent(snapshot_key(self.site_id, revision_id), data)
        return revision_id

    def put_manifest_stream(self, frame: Manifest, posts: Iterable[bytes]) -> str:
        """Write a manifest whose posts arrive as canonical PostRef bytes in id order, spooled to disk while hashed;
        returns its revision id. Same bytes, same id as `put_manifest` of the equivalent Manifest."""
        prefix, suffix = canonical_frame(frame)
        digest = hashlib.sha256()
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY_BYTES) as spool:

            def emit(data: bytes) -> None:
                digest.update(data)
                spool.write(data)

            emit(prefix + b"[")
            for n, post in enumerate(posts):
                emit(b"," + post if n else post)
            emit(b"]" + suffix)
            spool.seek(0)
            revision_id = digest.hexdigest()
            self.blobs.put_if_absent(snapshot_key(self.site_id, revision_id), spool)
        return revision_id

    def body(self, digest: str) -> PostBody:
        return PostBody.model_validate_json(self.blobs.get(body_key(self.site_id, digest)))

    def put_body(self, body: PostBody) -> str:
        digest = body.digest
        self.blobs.put_if_absent(body_key(self.site_id, digest), body.canonical_bytes())
        return digest


POSTS_OPENING = b'"posts":['  # where a canonical manifest's post list begins (its keys are sorted; see below)
READ_BYTES = 256 * 1024


class StreamedManifest:
    """A canonical manifest (content.canonical_frame: prefix + "[" + posts + "]" + suffix) read from a stream. The
    first unescaped `"posts":[` is the post list's opening: the keys before it (authors, events) hold only JSON
    strings, in which a double quote is always escaped. Iterate `posts()` once, then read `frame()`."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.buffer = b""
        self.prefix = self._until_posts()
        self.suffix: bytes | None = None

    def _until_posts(self) -> bytes:
        while (at := self.buffer.find(POSTS_OPENING)) < 0:
            chunk = self.stream.read(READ_BYTES)
            if not chunk:
                raise ValueError("not a manifest: no post list")
            self.buffer += chunk
        prefix, self.buffer = self.buffer[: at + len(POSTS_OPENING) - 1], self.buffer[at + len(POSTS_OPENING) :]
        return prefix

    def posts(self) -> Iterator[dict[str, Any]]:
        """Each post as parsed from its canonical JSON object, in the manifest's (id) order."""
        decoder = json.JSONDecoder()
        reader = codecs.getincrementaldecoder("utf-8")()
        text, at = reader.decode(self.buffer), 0
        self.buffer = b""
        eof = False
        while True:
            while at < len(text) and text[at] in ", ":
                at += 1
            if at < len(text) and text[at] == "]":
                self.suffix = (text[at + 1 :] + reader.decode(self.stream.read(), final=True)).encode()
                return
            try:
                post, end = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                if eof:
                    raise
                chunk = self.stream.read(READ_BYTES)
                eof = not chunk
                text, at = text[at:] + reader.decode(chunk, final=eof), 0
                continue
            yield post
            at = end

    def frame(self) -> Manifest:
        """The manifest without its posts (after `posts()` has been read to its end)."""
        if self.suffix is None:
            raise RuntimeError("read the posts first")
        return Manifest.from_bytes(self.prefix + b"[]" + self.suffix)


class BodyWriter:
    """Writes post bodies concurrently with a bounded number in flight, so memory stays bounded on huge imports.

    Bodies whose digest is already known (present in the head revision) are not written again.
    """

    def __init__(
        self, store: ContentStore, known: set[str] | None = None, concurrency: int = WRITE_CONCURRENCY
    ) -> None:
        self.store = store
        self.known = set(known or ())
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="body-writer")
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
        """Every body handed in so far is stored (before a checkpoint names a revision that refers to them)."""
        self._drain()

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
