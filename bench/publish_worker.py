"""Child process of the publication memory benchmark: run one whole publication (plan, every chunk, finish) with the
real publication worker core in this process, print wall time and peak RSS."""

from __future__ import annotations

import json
import sys
import time

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import PublicationMessage
from sitedispatch.domain.settings import Settings

from .import_worker import peak_rss_kib


def main() -> None:
    site_id, seq = sys.argv[1], int(sys.argv[2])
    deps = Dependencies(Settings()).warm()
    worker = deps.publication_worker()
    publication = deps.publications.get(site_id, seq)
    assert publication is not None
    started = time.perf_counter()
    worker.process(PublicationMessage(site_id, publication.revision_id, seq))  # plan
    planned = deps.publications.get(site_id, seq)
    assert planned is not None and planned.total_chunks is not None
    for chunk in range(planned.total_chunks):
        worker.process(PublicationMessage(site_id, publication.revision_id, seq, chunk))
    elapsed = time.perf_counter() - started
    record = deps.sites.get(site_id)
    print(
        json.dumps(
            {
                "chunks": planned.total_chunks,
                "seconds": round(elapsed, 2),
                "live": record is not None and record.live_seq == seq,
                "peak_rss_mb": round(peak_rss_kib() / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
