"""What a `reconcile` sweep costs a quiet fleet: the AWS requests of one sweep (counted with botocore event hooks,
as bench/requests.py counts an operation's) and the items DynamoDB returned, at several fleet sizes.

A quiet fleet: registered sites, nothing accepted, queued or running, nothing promoted within the live-repair
window, no counter moved since a recount found it at zero. The first sweep after the fleet is built settles what
earlier traffic left (counters found at zero leave the by-held index); the second is measured.
"""

from __future__ import annotations

import time
from typing import Any

from bench.requests import RequestCounter
from sitedispatch.dependencies import Dependencies

REGISTER_THREADS = 8


class ItemCounter:
    """Items DynamoDB returned (Query and Scan `Count`, BatchGetItem responses, GetItem hits)."""

    def __init__(self) -> None:
        self.items = 0

    def __call__(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if "Count" in parsed:
            self.items += int(parsed["Count"])
        elif model.name == "BatchGetItem":
            self.items += sum(len(rows) for rows in parsed.get("Responses", {}).values())
        elif model.name == "GetItem" and "Item" in parsed:
            self.items += 1


def register_quiet_sites(deps: Dependencies, first: int, count: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    now = time.time()
    with ThreadPoolExecutor(REGISTER_THREADS) as pool:
        list(pool.map(lambda n: deps.sites.register(f"quiet-{n:06d}", "sweeper", now), range(first, first + count)))


def sweep_cost(deps: Dependencies) -> dict[str, Any]:
    """The requests and items of one `reconcile` sweep, after one that settles the fleet."""
    requests, items = RequestCounter(), ItemCounter()
    for client in (deps.sqs, deps.s3, deps.models.Operation._get_connection().connection.client):
        client.meta.events.register("provide-client-params.*.*", requests)
        client.meta.events.register("after-call.dynamodb.*", items)
    reconciler = deps.reconciler()
    requests.paused = True
    reconciler.run("reconcile")
    requests.paused = False
    requests.reset()
    items.items = 0
    started = time.perf_counter()
    sweep = reconciler.run("reconcile")
    seconds = time.perf_counter() - started
    counted = requests.reset()
    for client in (deps.sqs, deps.s3, deps.models.Operation._get_connection().connection.client):
        client.meta.events.unregister("provide-client-params.*.*", requests)
        client.meta.events.unregister("after-call.dynamodb.*", items)
    return {
        "requests": counted["requests"],
        "total_requests": counted["total"],
        "items_read": items.items,
        "repaired": sweep.repaired if sweep else {},
        "seconds_on_emulator": round(seconds, 3),
    }


def measure(sizes: tuple[int, ...] = (100, 1_000, 10_000)) -> list[dict[str, Any]]:
    """A fresh in-process moto server; the fleet grows to each size in turn and one sweep is measured at each."""
    import os

    from sitedispatch.local.cloud import create_resources, in_process_cloud, local_environment

    rows = []
    with in_process_cloud() as endpoint:
        settings = create_resources(endpoint, prefix="sweeps")
        os.environ.update(local_environment(settings, endpoint))
        deps = Dependencies(settings)
        registered = 0
        for size in sorted(sizes):
            register_quiet_sites(deps, registered, size - registered)
            registered = size
            row = {"sites": size, **sweep_cost(deps)}
            rows.append(row)
            print(
                f"reconcile sweep at {size} quiet sites: {row['total_requests']} requests, "
                f"{row['items_read']} items read ({row['seconds_on_emulator']} s on the emulator)",
                flush=True,
            )
    return rows
