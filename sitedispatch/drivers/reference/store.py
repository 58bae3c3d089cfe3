"""Reading and writing a site's content blobs: manifests (revisions) and post bodies, all immutable."""

from __future__ import annotations

import hashlib
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType

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
