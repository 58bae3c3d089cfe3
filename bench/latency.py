"""Latency, published: enqueue-to-start and enqueue-to-live (p50, p99) of provisions submitted for 1, 10 and 100
sites at once, measured on the local runtime; and the same on AWS from an operation's request counts and AWS's
latencies (stated below, with where they come from).

Enqueue-to-start: from the operation's acceptance (its row's created_at) to its attempt's claim (started_at).
Enqueue-to-live: from acceptance to the site's live pointer naming the publication the operation asked for.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime

from .simulation import percentile

SITES = (1, 10, 100)
PROVISION = {"title": "Latency", "admin_email": "latency@example.org"}
SUBMITTERS = 10  # producer threads submitting at once

# Per-request latencies on AWS in seconds (median, p99), assumed from AWS's own statements where there is one:
# DynamoDB "single-digit millisecond" reads and writes (https://aws.amazon.com/dynamodb/), transactions about twice
# a single write (they are two-phase: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/
# transaction-apis.html); S3 "100-200 milliseconds" first-byte latency for small objects
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance-guidelines.html, used as p50 and p99
# of GETs; PUTs assumed the same); SQS has no published latency: 10 ms / 30 ms assumed. The event source mapping's
# hop (a message sent to a queue its pollers are long-polling, to the invocation) is assumed 50 ms / 200 ms.
AWS_LATENCY_S: dict[str, tuple[float, float]] = {
    "dynamodb": (0.005, 0.020),
    "dynamodb:TransactWriteItems": (0.012, 0.040),
    "s3": (0.100, 0.200),
    "sqs": (0.010, 0.030),
    "esm_hop": (0.050, 0.200),
}


def _wait_live(deps: Dependencies, ops: list[Any], timeout_s: float) -> list[dict[str, float]]:
    deadline = time.monotonic() + timeout_s
    rows: dict[str, dict[str, float]] = {}
    while time.monotonic() < deadline and len(rows) < len(ops):
        for op in ops:
            if op.operation_id in rows:
                continue
            current = deps.operations.get(op.operation_id)
            if current is None or not current.status.terminal:
                continue
            if current.status != Status.SUCCEEDED:
                raise RuntimeError(f"{op.operation_id} ended {current.status.value}")
            site = deps.sites.get(op.site_id)
            if site is None or site.live_at is None or site.live_seq < 1:
                continue
            rows[op.operation_id] = {
                "start_s": float(current.started_at or 0.0) - op.created_at,
                "live_s": float(site.live_at) - op.created_at,
            }
        time.sleep(0.1)
    if len(rows) < len(ops):
        raise RuntimeError(f"only {len(rows)} of {len(ops)} operations live within {timeout_s:.0f} s")
    return list(rows.values())


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50_s": round(percentile(samples, 50), 3), "p99_s": round(percentile(samples, 99), 3)}


def measure_local(workdir: Path, sites: tuple[int, ...] = SITES, workers: int = 2, environments: int = 5) -> list[Any]:
    """One local runtime (two operations workers and one publications worker of `environments` each); each round
    submits provisions for fresh sites from SUBMITTERS threads at once."""
    rows = []
    with LocalRuntime(workdir / "latency") as runtime:
        env = runtime.start_cloud(0)
        specs: list[tuple[str, int, str | None, list[str] | None, dict[str, str] | None]] = [
            ("operations", environments, None, None, None) for _ in range(workers)
        ]
        runtime.start_workers([*specs, ("publications", environments, None, None, None)])
        os.environ.update(env)
        deps = Dependencies(Settings())
        submitter = deps.submitter()
        for n in sites:

            def submit(i: int, n: int = n) -> Any:
                site = f"latency-{n:03d}-{i:03d}"
                return submitter.submit(kind="provision", site_id=site, principal=f"p{i % 10}", params=PROVISION)

            with ThreadPoolExecutor(SUBMITTERS) as pool:
                ops = [result.operation for result in pool.map(submit, range(n))]
            measured = _wait_live(deps, ops, timeout_s=60 + 2 * n)
            row: dict[str, Any] = {
                "sites": n,
                "concurrency": workers * environments,
                "enqueue_to_start": summary([m["start_s"] for m in measured]),
                "enqueue_to_live": summary([m["live_s"] for m in measured]),
            }
            rows.append(row)
            print(
                f"latency, {n} site(s) at once on the local runtime: start p50 {row['enqueue_to_start']['p50_s']} s "
                f"p99 {row['enqueue_to_start']['p99_s']} s; live p50 {row['enqueue_to_live']['p50_s']} s "
                f"p99 {row['enqueue_to_live']['p99_s']} s",
                flush=True,
            )
    return rows


def _requests_latency(requests: dict[str, int], quantile: int) -> float:
    """The requests made one after another, each at its service's latency (median: 0, p99: 1)."""
    total = 0.0
    for name, count in requests.items():
        service = name.split(":", 1)[0]
        total += count * AWS_LATENCY_S.get(name, AWS_LATENCY_S.get(service, (0.0, 0.0)))[quantile]
    return total


def model_aws(costs: dict[str, Any], kind: str = "provision", operation_s: float = 0.0) -> dict[str, Any]:
    """Enqueue-to-start and enqueue-to-live on AWS for one `kind` operation with warm environments and free
    concurrency (a backlog adds its queueing, which bench/fleet.py models): the requests between acceptance and the
    claim (the first delivery's read and claim transaction), then the rest of the attempt, the publication's hop and
    its requests, each at AWS_LATENCY_S, plus `operation_s` of the kind's own work. A p99 here sums every request's
    p99, which overstates it (they are not all slow at once)."""
    functions = dict(costs["per_operation"][kind]["functions"]["requests"])
    before_start = {"dynamodb:BatchGetItem": 1, "dynamodb:TransactWriteItems": 1}
    rest = {k: v - before_start.get(k, 0) for k, v in functions.items()}
    rows: dict[str, Any] = {}
    for label, q in (("p50_s", 0), ("p99_s", 1)):
        start = AWS_LATENCY_S["esm_hop"][q] + _requests_latency(before_start, q)
        live = start + _requests_latency(rest, q) + AWS_LATENCY_S["esm_hop"][q] + operation_s
        rows[label] = {"enqueue_to_start_s": round(start, 3), "enqueue_to_live_s": round(live, 3)}
    return {"kind": kind, "assumed_latencies_s": AWS_LATENCY_S, **rows}
