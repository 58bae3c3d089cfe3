"""Child process of the large-site publication benchmark: one publication message (the plan step, or one chunk;
or, `rest`, every chunk not yet done) handled by the real publication worker core in a fresh process (a cold
environment), with its wall time, peak RSS and the blob requests it made."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import PublicationMessage
from sitedispatch.domain.settings import Settings

from .import_worker import peak_rss_kib


def main() -> None:
    site_id, seq, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    deps = Dependencies(Settings()).warm()
    requests: Counter[str] = Counter()
    blobs = deps.blobs
    for name in ("get", "put_if_absent"):
        inner = getattr(blobs, name)

        def counted(*args: Any, _inner: Any = inner, _name: str = name, **kwargs: Any) -> Any:
            requests[f"{_name} {args[0].split('/')[2]}"] += 1
            return _inner(*args, **kwargs)

        setattr(blobs, name, counted)
    worker = deps.publication_worker()
    publication = deps.publications.get(site_id, seq)
    assert publication is not None
    if step == "rest":  # every chunk not yet done, then the fan-in: the whole publication's end, in this process
        messages = [
            PublicationMessage(site_id, publication.revision_id, seq, n)
            for n in range(publication.total_chunks or 0)
            if n not in publication.done_chunks
        ]
    elif step == "plan":
        messages = [PublicationMessage(site_id, publication.revision_id, seq)]
    else:
        messages = [PublicationMessage(site_id, publication.revision_id, seq, int(step))]
    started = time.perf_counter()
    for message in messages:
        result = worker.process(message)
    print(
        json.dumps(
            {
                "step": step,
                "result": result.reason,
                "messages": len(messages),
                "seconds": round(time.perf_counter() - started, 2),
                "peak_rss_mb": round(peak_rss_kib() / 1024, 1),
                "requests": dict(sorted(requests.items())),
            }
        )
    )


if __name__ == "__main__":
    main()
