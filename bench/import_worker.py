"""Child process of the import benchmark: process one import delivery with the real worker core, print peak RSS."""

from __future__ import annotations

import json
import sys
import time

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import QueueMessage
from sitedispatch.domain.settings import Settings


def peak_rss_kib() -> int:
    """This process's own peak resident set (VmHWM). Not getrusage's ru_maxrss: Linux carries the pre-exec image's
    high-water mark into it, so a child started from a large parent reports the parent's size (seen: 255 MB for a
    publication of 500 routes and of 4,700 routes alike)."""
    for line in open("/proc/self/status"):  # noqa: SIM115
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


class NoVisibility:
    receipt = "bench"  # nothing receives it again: the bench delivers once

    def change(self, seconds: float) -> None:
        pass


def main() -> None:
    """ARGS: operation id, site id, and optionally the invocation's function timeout in seconds (its deadline)."""
    operation_id, site_id = sys.argv[1], sys.argv[2]
    deadline = time.time() + float(sys.argv[3]) if len(sys.argv) > 3 else None
    deps = Dependencies(Settings()).warm()
    started = time.perf_counter()
    result = deps.worker().process(QueueMessage(operation_id, site_id), NoVisibility(), deadline=deadline)
    elapsed = time.perf_counter() - started
    peak_kib = peak_rss_kib()
    print(
        json.dumps(
            {
                "outcome": result.outcome.value,
                "reason": result.reason,
                "seconds": round(elapsed, 2),
                "peak_rss_mb": round(peak_kib / 1024, 1),
                "summary": result.commit.summary if result.commit else None,
            }
        )
    )


if __name__ == "__main__":
    main()
