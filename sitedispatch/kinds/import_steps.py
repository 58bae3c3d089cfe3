"""An import in bounded steps, for every driver: after every `import_step_items` events or `ctx.step_s()` seconds
the driver stores what the step did (the reference driver: the manifest merged so far and the merge's state; the
wordpress driver: what it has counted, WordPress holding the items) and a checkpoint naming it and the file's
position is recorded under the attempt's fence (`HandlerContext.step_done`, which also hands the attempt to the next
invocation when this one has no time for another step). The next invocation, or the next attempt after a crash or a
lost lease, continues from the last checkpoint, never from the first item; what a step redoes creates nothing twice
(content-addressed blobs; WordPress items keyed by their source). The operation still ends in one commit. A
reference site large enough to be stored in pages is read and written a page at a time (reference/merge.py), so a
step's memory is what the step touches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from sitedispatch.domain.ports import BlobStore
from sitedispatch.wxr import HashingReader, WxrEvent, WxrPosition, read_wxr

if TYPE_CHECKING:
    from sitedispatch.kinds.contract import HandlerContext

HASH_BYTES = 1024 * 1024  # a resumed step hashes the file's prefix in reads of this size


def state_key(site_id: str, digest: str) -> str:
    return f"checkpoints/{site_id}/{digest}.json"


@dataclass(frozen=True)
class ImportCheckpoint:
    """Where an import is: the file (by digest) and the position its reading resumes at, the head it started from
    (None for a driver whose resume does not depend on it), the revision merged so far (None for a driver whose
    destination holds the items) and the driver's other state (by key), and how far it has come."""

    source_digest: str
    base: str | None
    position: WxrPosition
    revision: str | None
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
            None if data.get("revision") is None else str(data["revision"]),
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


class Steps:
    """A file's events counted into steps: before the first event of each new step, `checkpoint(position)` records
    the steps completed so far (the driver stores its state, then `ctx.step_done`); it heartbeats every
    `heartbeat_every` events. `source` is the file being read, from the start or from `at` on: its digest covers the
    whole file either way, checked by the driver once the events end."""

    def __init__(self, ctx: HandlerContext, source_key: str, at: ImportCheckpoint | None, heartbeat_every: int) -> None:
        self.ctx = ctx
        self.heartbeat_every = heartbeat_every
        self.done = at.steps if at is not None else 0  # steps completed (by earlier invocations, then this one)
        self.resumed_from = self.done
        self.started_at = at.started_at if at is not None else ctx.clock.now()
        if at is None:
            self.source, resume = HashingReader(ctx.blobs.open(source_key)), None
        else:
            self.source, header = resumed_source(ctx.blobs, source_key, at.position)
            resume = (header, at.position)
        self._events = read_wxr(self.source, resume)

    def events(self, checkpoint: Callable[[WxrPosition], None]) -> Iterator[WxrEvent]:
        settings, clock, step_s = self.ctx.settings, self.ctx.clock, self.ctx.step_s()
        in_step, began = 0, clock.now()
        for n, (position, event) in enumerate(self._events, start=1):
            if in_step >= settings.import_step_items or clock.now() - began >= step_s:
                self.done += 1
                checkpoint(position)
                in_step, began = 0, clock.now()
            yield event
            in_step += 1
            if n % self.heartbeat_every == 0:
                self.ctx.heartbeat()

    @property
    def total(self) -> int:
        """Steps the whole import took, the last (unrecorded: the commit ends it) included."""
        return self.done + 1

    def record(
        self,
        source_digest: str,
        base: str | None,
        position: WxrPosition,
        revision: str | None,
        state_key: str,
        items: int,
        bytes_total: int,
    ) -> None:
        """The checkpoint of the steps done so far, recorded (and, out of time, the attempt handed over)."""
        checkpoint = ImportCheckpoint(
            source_digest,
            base,
            position,
            revision,
            state_key,
            items,
            self.done,
            bytes_total,
            self.started_at,
            self.ctx.clock.now(),
        )
        self.ctx.step_done(checkpoint.to_dict())
