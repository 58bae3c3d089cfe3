"""Child process of the import benchmark: process one import delivery with the real worker core, print peak RSS."""

from __future__ import annotations

import json
import resource
import sys
import time

from sitedispatch.dependencies import Dependencies
from sitedispatch.model import QueueMessage
from sitedispatch.settings import Settings


class NoVisibility:
    def change(self, seconds: float) -> None:
        pass


def main() -> None:
    operation_id, site_id = sys.argv[1], sys.argv[2]
    deps = Dependencies(Settings()).warm()  # type: ignore[call-arg]
    started = time.perf_counter()
    result = deps.worker().process(QueueMessage(operation_id, site_id), NoVisibility())
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"outcome": result.outcome.value, "reason": result.reason, "seconds": round(elapsed, 2),
                      "peak_rss_mb": round(peak_kib / 1024, 1),
                      "summary": result.commit.summary if result.commit else None}))


if __name__ == "__main__":
    main()
