"""A large site published on the local runtime as `local up` runs it, and what small sites wait meanwhile.

The runtime is `local up`'s: the template's functions with the local 30 s timeout, two publications workers of five
environments each (ten chunks at once on this machine's cores). A site of `posts` posts is imported (a site in
pages: chunks of ~1,024 routes), and once its publication is planned, each small site asks for a publication of its
own. Figures: the large publication's time from its commit to its promotion, its chunks and how many deliveries
handed the rest of a chunk on, the steps delivered again (a timeout or a stop shows there), and each small site's
publication time meanwhile."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Publication
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.publication.live import receipt_key

from .polling import PROVISION, present, wait

WORKERS, ENVIRONMENTS = 2, 5  # `local up`'s defaults
PRINCIPAL = "bench"


def _publication(deps: Dependencies, site: str, seq: int) -> Publication | None:
    return deps.publications.get(site, seq)


def _live(deps: Dependencies, site: str, seq: int) -> Callable[[], bool]:
    def check() -> bool:
        record = deps.sites.get(site)
        return record is not None and record.live_seq >= seq

    return check


def _seconds_to_live(deps: Dependencies, site: str, seq: int) -> float:
    publication, record = _publication(deps, site, seq), deps.sites.get(site)
    assert publication is not None and record is not None and record.live_at is not None
    return round(record.live_at - publication.created_at, 2)


def measure(workdir: Path, posts: int, small_sites: int = 5, timeout_s: float = 3600) -> dict[str, Any]:
    with LocalRuntime(workdir) as runtime:
        env = runtime.start_cloud(0)
        specs: list[tuple[str, int, str | None, list[str] | None, dict[str, str] | None]] = []
        for _ in range(WORKERS):
            specs += [(queue, ENVIRONMENTS, None, None, None) for queue in ("operations", "bulk", "publications")]
        runtime.start_workers(specs)
        os.environ.update(env)
        deps = Dependencies(Settings()).warm()
        large, smalls = "large-site", [f"small-site-{n}" for n in range(small_sites)]
        submitter = deps.submitter()
        for site in (large, *smalls):
            submitter.submit(kind="provision", site_id=site, principal=PRINCIPAL, params=PROVISION)
        for site in (large, *smalls):
            wait(_live(deps, site, 1), 300, f"{site} live")
        with tempfile.TemporaryDirectory() as tmp:
            wxr = Path(tmp) / "large.xml"
            counts = write_wxr(wxr, posts=posts, seed=posts)
            wxr_bytes = wxr.stat().st_size
            began = time.monotonic()
            submitter.submit(
                kind="import", site_id=large, principal=PRINCIPAL, params=submitter.stage_upload(large, wxr, PRINCIPAL)
            )
        wait(lambda: (p := _publication(deps, large, 2)) is not None and p.total_chunks, timeout_s, "large planned")
        imported_and_planned_s = round(time.monotonic() - began, 2)
        for site in smalls:  # each small site asks for a publication while the large one's chunks fill the queue
            submitter.submit(kind="publish", site_id=site, principal=PRINCIPAL, params={})
        for site in smalls:
            wait(_live(deps, site, 2), timeout_s, f"{site} republished")
        small_waits = [_seconds_to_live(deps, site, 2) for site in smalls]
        wait(_live(deps, large, 2), timeout_s, "large publication live")
        publication = present(_publication(deps, large, 2))
        receipt = json.loads(deps.blobs.get(receipt_key(large, publication.revision_id)))
        logs = "".join(log.read_text() for log in runtime.workdir.glob("worker-publications-*.log"))
        return {
            "posts": counts["posts"],
            "wxr_mb": round(wxr_bytes / 1024**2, 1),
            "routes": receipt["route_count"],
            "chunks": publication.total_chunks,
            "function_timeout_s": int(env.get("SITEDISPATCH_LOCAL_FUNCTION_TIMEOUT_S") or 30),
            "publication_environments": WORKERS * ENVIRONMENTS,
            "slice_s": deps.settings.publication_slice_s,
            "import_and_plan_s": imported_and_planned_s,
            "publication_s": _seconds_to_live(deps, large, 2),
            "deliveries_continued": logs.count('"chunk continued"'),
            "deliveries_timed_out": logs.count("Task timed out"),
            "steps_delivered_again": publication.retried_steps,
            "last_failure": publication.last_failure,
            "small_sites_publication_s": small_waits,
        }


def report(workdir: Path, posts: int) -> dict[str, Any]:
    figures = measure(workdir, posts)
    print(
        f"publication of {figures['posts']:,} posts ({figures['routes']:,} routes, {figures['chunks']} chunks) on "
        f"`local up`'s runtime: {figures['publication_s']} s, {figures['deliveries_continued']} deliveries continued, "
        f"{figures['deliveries_timed_out']} timed out; small sites meanwhile {figures['small_sites_publication_s']} s",
        flush=True,
    )
    return figures


if __name__ == "__main__":  # this one alone: python -m bench.large_publication [posts]
    import sys

    from bench import stamp

    with tempfile.TemporaryDirectory() as tmp:
        figures = report(Path(tmp) / "large-publication", int(sys.argv[1]) if len(sys.argv) > 1 else 40_000)
    stamp.RESULTS.mkdir(parents=True, exist_ok=True)
    (stamp.RESULTS / "publication-large-site.json").write_text(json.dumps({**stamp.meta(), **figures}, indent=2))
