"""The operator console over a fleet with 10,000 operations: how long each page takes, through the local API on moto.
Prints its figures and writes them to bench/results/console.json (`make bench` runs it; `python -m bench.console`).

The rows are written straight into the tables (10,000 operations of 3 principals and 6 tenants over 500 sites, in
every status, a fifth of them dead in 4 error classes): what is measured is the console and the API reading them,
not admission. Each page is fetched `RUNS` times as a browser would (the session cookie, the full HTML); the
figures are the median and the slowest, in milliseconds, with the API requests each page made.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import replace
from typing import Any

import urllib3

from sitedispatch.aws.operation_rows import error_dict
from sitedispatch.aws.tables import HELD, dead_class_key, index_shard
from sitedispatch.client import ApiClient
from sitedispatch.console import running_console
from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import ErrorInfo, Kind, Operation, Status
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import limits_for, recount, running_group_for, share_group_for
from sitedispatch.local.cloud import create_resources, in_process_cloud, local_environment

from .stamp import RESULTS, meta

OPERATIONS = 10_000
SITES = 500
RUNS = 11
PRINCIPALS = ("control-plane", "agency", "solo")
CODES = ("wxr_malformed", "site_not_provisioned", "timeout", "driver_refused")
STATUSES = (Status.SUCCEEDED,) * 6 + (Status.DEAD, Status.QUEUED, Status.CANCELLED, Status.RUNNING)
PAGES = (
    "/",
    "/sites",
    "/sites/site-0007",
    "/operations",
    "/operations?status=dead",
    "/operations?site_id=site-0007",
    "/operations?principal=control-plane&tenant=customer-1",
    "/operations?error_code=timeout",
    "/dead-letters",
    "/dead-letters/redrive?error_code=timeout",
    "/audit",
    "/events",
)


def _operation(n: int, now: float) -> Operation:
    status = STATUSES[n % len(STATUSES)]
    principal = PRINCIPALS[n % len(PRINCIPALS)]
    error = ErrorInfo("PermanentError", CODES[n % len(CODES)], "failed", False) if status == Status.DEAD else None
    created = now - 3000 + n * 0.3
    return Operation(
        operation_id=f"op_{n:032x}",
        site_id=f"site-{n % SITES:04d}",
        principal=principal,
        kind=(Kind.PROVISION, Kind.PUBLISH, Kind.IMPORT, Kind.WP_CRON)[n % 4],
        status=status,
        input_key="",
        input_digest=f"{n:064x}",
        idempotency_key=f"k{n}",
        created_at=created,
        updated_at=created + 1,
        attempt=1 + n % 3,
        finished_at=created + 1 if status.terminal else None,
        error=error,
        evidence={"error_code": error.code, "error_message": "failed"} if error else None,
        tenant=f"customer-{n % 2}" if principal == "control-plane" else "",
    )


def holding(op: Operation, settings: Settings) -> Operation:
    """An unfinished operation holding what admission and a start would have given it (each group's home shard)."""
    if op.status.terminal:
        return op
    holds = tuple(limit.group.home_slot(limit.placed_by).counter for limit in limits_for(settings, op))
    share = share_group_for(settings, op).home_slot(op.operation_id).counter
    running = (
        running_group_for(settings, op).home_slot(op.operation_id).counter if op.status == Status.RUNNING else None
    )
    return replace(op, holds=holds, share=share, running_slot=running)


def seed(deps: Dependencies) -> None:
    """The operations, and the flow counters their rows say they hold (as admission would have moved them)."""
    now = time.time()
    store: Any = deps.operations
    ops = [holding(_operation(n, now), deps.settings) for n in range(OPERATIONS)]
    with store.M.batch_write() as batch:
        for op in ops:
            item = store._item(op)
            if op.status.terminal:  # as the transitions that ended it wrote it
                item.finished_at, item.error = op.finished_at, None if op.error is None else error_dict(op.error)
                item.evidence = op.evidence
                item.dead_class = dead_class_key(op.error_code or "") if op.status == Status.DEAD else None
            batch.save(item)
    owners = {f"site-{n:04d}": PRINCIPALS[n % len(PRINCIPALS)] for n in range(SITES)}
    C = store.flow.C
    with C.batch_write() as batch:
        for counter, value in recount(op for op in ops if not op.status.terminal).items():
            site = counter.removeprefix("site#")
            batch.save(C(counter, value=value, held=index_shard(HELD, counter), owner=owners.get(site), changed_at=now))
    for n in range(SITES):
        deps.sites.register(f"site-{n:04d}", PRINCIPALS[n % len(PRINCIPALS)], now)


def measure() -> dict[str, Any]:
    from sitedispatch.local.gateway import running_gateway
    from tests.conftest import fresh_functions

    with in_process_cloud() as endpoint:
        settings = create_resources(endpoint, prefix="console")
        os.environ.update(local_environment(settings, endpoint))
        os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
        deps = Dependencies(Settings()).warm()
        started = time.monotonic()
        seed(deps)
        seeded_s = time.monotonic() - started
        fresh_functions()
        with running_gateway() as url, running_console(ApiClient(url, identity="operator")) as server:
            http = urllib3.PoolManager(retries=False)
            opened = http.request("GET", server.gate.url, redirect=False)
            cookie = {"Cookie": opened.headers["Set-Cookie"].split(";")[0]}
            pages = {}
            for path in PAGES:
                times = []
                for _ in range(RUNS):
                    t0 = time.perf_counter()
                    response = http.request("GET", f"{server.gate.origin}{path}", headers=cookie)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert response.status == 200, (path, response.status, response.data[:300])
                pages[path] = {"median_ms": round(statistics.median(times)), "max_ms": round(max(times))}
                print(f"{path:<60} median {pages[path]['median_ms']:>6} ms   max {pages[path]['max_ms']:>6} ms")
            # what the preview counted: the class's dead operations (a fifth of them dead, in 4 classes)
            preview = ApiClient(url, identity="operator").call(
                "POST", "/dead-letters/redrive", body={"error_code": "timeout", "dry_run": True}
            )
            selected = len(preview["selected"])
            print(f"the redrive preview selected {selected} dead operations of class timeout")
    return {
        "operations": OPERATIONS,
        "sites": SITES,
        "runs": RUNS,
        "seeded_s": round(seeded_s, 1),
        "pages": pages,
        "redrive_preview_selected": selected,
    }


def main() -> None:
    figures = {**meta(), **measure()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "console.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {RESULTS / 'console.json'}")


if __name__ == "__main__":
    main()
