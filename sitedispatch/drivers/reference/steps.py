"""An import in bounded steps: after every `import_step_items` items or `import_step_s` seconds the merge so far is
stored (the manifest it has produced, content-addressed like any revision, and the rest of the merge's state) and a
checkpoint naming them and the file's position is recorded under the attempt's fence. The next attempt after a crash
or a lost lease continues from the last checkpoint, never from the first item; bodies and manifests are
content-addressed, so what a step redoes is never stored twice. The operation still ends in one commit.

Not yet: continuing in a later invocation without spending an attempt, and memory bounded by the step (the merge
still holds the site's whole post index, as a step-less import does).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import IO, Any

from sitedispatch.domain.ports import BlobStore
from sitedispatch.wxr import HashingReader, WxrPosition

HASH_BYTES = 1024 * 1024  # a resumed step hashes the file's prefix in reads of this size


def state_key(site_id: str, digest: str) -> str:
    return f"checkpoints/{site_id}/{digest}.json"


@dataclass(frozen=True)
class ImportCheckpoint:
    """Where an import is: the file (by digest) and the position its reading resumes at, the head it started from,
    the manifest merged so far and the merge's other state (by key), and how far it has come."""

    source_digest: str
    base: str | None
    position: WxrPosition
    revision: str
    state_key: str
    items: int
    steps: int
    bytes_total: int
    started_at: float  # when the import's first step began (carried over by a resumed attempt)
    at: float  # when this checkpoint was recorded

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "import",
            "source_digest": self.source_digest,
            "base": self.base,
            "header_end": self.position.header_end,
            "offset": self.position.offset,
            "revision": self.revision,
            "state_key": self.state_key,
            "items": self.items,
            "steps": self.steps,
            "bytes_done": self.position.offset,
            "bytes_total": self.bytes_total,
            "started_at": self.started_at,
            "at": self.at,
        }

    @classmethod
    def of(cls, data: dict[str, Any] | None, source_digest: str, head: str | None) -> ImportCheckpoint | None:
        """The checkpoint an operation's row holds, if it is an import's of this very file onto the site's current
        head (a redrive with another input, or after another operation committed, starts over)."""
        if not data or data.get("kind") != "import" or data.get("source_digest") != source_digest:
            return None
        if data.get("base") != head:
            return None
        return cls(
            source_digest,
            head,
            WxrPosition(int(data["header_end"]), int(data["offset"])),
            str(data["revision"]),
            str(data["state_key"]),
            int(data["items"]),
            int(data["steps"]),
            int(data["bytes_total"]),
            float(data.get("started_at", 0.0)),
            float(data.get("at", 0.0)),
        )


def store_state(blobs: BlobStore, site_id: str, state: dict[str, Any]) -> str:
    body = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    key = state_key(site_id, hashlib.sha256(body).hexdigest())
    blobs.put_if_absent(key, body)
    return key


def resumed_source(blobs: BlobStore, key: str, at: WxrPosition) -> tuple[HashingReader, bytes]:
    """The file from `at` on, its digest already fed with every byte before it (so the end of the reading still
    checks the whole file), and its header."""
    prefix = hashlib.sha256()
    stream: IO[bytes] = blobs.open(key, 0, at.offset)
    while chunk := stream.read(HASH_BYTES):
        prefix.update(chunk)
    source = HashingReader(blobs.open(key, at.offset))
    source.sha256, source.size = prefix, at.offset
    return source, blobs.open(key, 0, at.header_end).read()
