"""A long operation's progress, from its last checkpoint: how far it has come, at what rate, and when it should end
at that rate (the bytes of its file read per second since it began, measured, not assumed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Progress:
    steps: int
    items: int
    bytes_done: int
    bytes_total: int
    rate_bytes_s: float | None  # None until a step has completed after some time
    eta_s: float | None  # remaining bytes at that rate
    fraction: float  # of the file's bytes read (0 when its size is unknown)

    @classmethod
    def of(cls, checkpoint: dict[str, Any] | None) -> Progress | None:
        if not checkpoint:
            return None
        done, total = int(checkpoint.get("bytes_done", 0)), int(checkpoint.get("bytes_total", 0))
        elapsed = float(checkpoint.get("at", 0.0)) - float(checkpoint.get("started_at", 0.0))
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        eta = max(0.0, total - done) / rate if rate else None
        fraction = min(1.0, done / total) if total else 0.0
        return cls(int(checkpoint.get("steps", 0)), int(checkpoint.get("items", 0)), done, total, rate, eta, fraction)
