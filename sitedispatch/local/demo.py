"""`sitedispatch demo`: the local runtime, a fleet provisioned at once, and the cron round-robin it replaces."""

from __future__ import annotations

import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Operation, Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime

CRON_PERIOD_S = 60.0  # the replaced scheduler: one site (or one publication route) per minute
PROGRESS = {Status.ACCEPTED: 5, Status.QUEUED: 10, Status.RUNNING: 20}
WORKER_PROCESSES = 2
PUBLICATION_ENVIRONMENTS = 4
IMPORT_SITES = 3
EXPORT_POSTS = 60  # the demo's WordPress export (generated, seeded): posts, with categories, tags and comments


def demo_export(workdir: Path) -> Path:
    """The WordPress export the demo imports, written for it (the same file every run: seeded)."""
    from sitedispatch.local.synthetic import write_wxr

    path = workdir / "demo-export.xml"
    write_wxr(path, posts=EXPORT_POSTS, seed=3)
    return path


class DemoApi:
    """The demo's two callers of the local HTTP API: the producer `demo` and an operator."""

    def __init__(self, url: str) -> None:
        from sitedispatch.client import ApiClient

        self.producer = ApiClient(url, identity="demo")
        self.operator = ApiClient(url, identity="operator")

    def submit(self, kind: str, site: str, params: dict[str, Any], key: str | None = None) -> Operation:
        from sitedispatch.client import operation_of

        headers = {"Idempotency-Key": key} if key else {}
        submitted = self.producer.call(
            "POST", "/operations", body={"kind": kind, "site_id": site, "params": params}, headers=headers
        )
        return operation_of(self.producer.call("GET", f"/operations/{submitted['operation_id']}"))


@dataclass(frozen=True)
class SiteRun:
    site_id: str
    operation_id: str
    status: str
    start_delay_s: float
    duration_s: float
    finished_after_s: float


def cron_finish_times(durations: list[float], period_s: float = CRON_PERIOD_S) -> list[float]:
    """Under the round-robin cron, site i gets its turn at minute i and finishes `duration` later."""
    return [i * period_s + d for i, d in enumerate(durations)]


def run_demo(
    n_sites: int,
    latency_s: float,
    workdir: Path,
    as_json: bool = False,
    timeout_s: float = 120.0,
    wordpress: bool | None = None,
) -> int:
    """`wordpress`: include a real WordPress site (None: when this machine has the packages)."""
    console = Console(stderr=as_json)
    console.width = max(console.width, 110)
    per_worker = math.ceil(n_sites / WORKER_PROCESSES)
    with LocalRuntime(workdir) as runtime:
        console.print(
            f"[bold]starting the local runtime[/]: moto server, the HTTP API, {WORKER_PROCESSES} workers x "
            f"{per_worker} environments (logs in {workdir}/)"
        )
        # 120 s functions: a real WordPress import through REST is slow (a shorter timeout still completes, by a
        # second attempt that finds the items the first one created)
        runtime.start_cloud(
            0,
            function_timeout_s=120,
            policy={"reference_latency_s": latency_s, "max_queued_per_site": 3, "pause_deferral_s": 2},
        )
        for _ in range(WORKER_PROCESSES):
            runtime.start_worker("operations", per_worker)
        runtime.start_worker("bulk", IMPORT_SITES)
        runtime.start_worker("publications", PUBLICATION_ENVIRONMENTS)
        api = DemoApi(runtime.start_api())
        os.environ.update(runtime.env)
        deps = Dependencies(Settings()).warm()  # the report's reads (what an operator sees)
        sites = [f"demo-site-{i:02d}" for i in range(1, n_sites + 1)]
        console.print(f"submitting {n_sites} provisions at once (each takes ~{latency_s:g}s of simulated work)")
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=n_sites) as pool:
            submitted = list(
                pool.map(
                    lambda s: api.submit(
                        "provision", s, {"title": f"Demo {s}", "admin_email": f"admin@{s}.example"}, f"demo-{s}"
                    ),
                    sites,
                )
            )
        final = _follow(deps, submitted, console, timeout_s)
        export = demo_export(workdir)
        imports = _import_phase(deps, api, console, sites[:IMPORT_SITES], export, timeout_s)
        flow = _flow_control_phase(deps, api, console, sites[-1], timeout_s)
        dead_letter = _dead_letter_phase(deps, api, console, sites[IMPORT_SITES], workdir, timeout_s)
        real = _wordpress_phase(deps, api, console, workdir, export, timeout_s, wordpress)

    runs = [
        SiteRun(
            op.site_id,
            op.operation_id,
            op.status.value,
            (op.started_at or t0) - (op.queued_at or op.created_at),
            (op.finished_at or time.time()) - (op.started_at or t0),
            (op.finished_at or time.time()) - t0,
        )
        for op in final
    ]
    ours = max(r.finished_after_s for r in runs)
    cron = cron_finish_times([r.duration_s for r in runs])
    cron_total = max(cron)
    starts = [op.started_at for op in final if op.started_at]
    spread = (max(starts) - min(starts)) if starts else float("nan")
    ok = all(r.status == Status.SUCCEEDED.value for r in runs)
    ok = ok and all(i["published"] for i in imports) and flow["refused"] and flow["superseded"] >= 1
    ok = ok and dead_letter["dead"] and dead_letter["recovered"]
    ok = ok and (real.get("skipped") is not None or bool(real.get("published")))
    summary = {
        "sites": n_sites,
        "all_succeeded": ok,
        "start_spread_s": round(spread, 3),
        "fleet_ready_s": round(ours, 3),
        "cron_fleet_ready_s": round(cron_total, 1),
        "speedup": round(cron_total / ours, 1),
        "runs": [r.__dict__ for r in runs],
        "imports": imports,
        "flow_control": flow,
        "dead_letter": dead_letter,
        "wordpress": real,
    }
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _report(console, runs, ours, cron, spread)
        _report_imports(console, imports)
    return 0 if ok else 1


def _import_phase(
    deps: Dependencies, api: DemoApi, console: Console, sites: list[str], source: Path, timeout_s: float
) -> list[dict[str, Any]]:
    """Import a WordPress export into a few sites at once and wait for each to be live."""
    console.print(f"importing {source.name} into {len(sites)} sites at once, then publishing every route")
    started = time.time()
    ops = {
        site: api.submit("import", site, api.producer.upload(site, source), f"import-{site}").operation_id
        for site in sites
    }
    deadline = time.monotonic() + timeout_s
    results: dict[str, dict[str, Any]] = {}
    while len(results) < len(sites) and time.monotonic() < deadline:
        for site, op_id in ops.items():
            if site in results:
                continue
            op = deps.operations.get(op_id)
            record = deps.sites.get(site)
            if op is None or record is None or not op.status.terminal:
                continue
            seq = op.result.get("publication", {}).get("seq")
            if op.status != Status.SUCCEEDED or (seq and record.live_seq >= seq):
                receipt = _receipt(deps, site, record.live_revision)
                results[site] = {
                    "site": site,
                    "status": op.status.value,
                    "published": bool(seq) and record.live_seq >= seq,
                    "routes": receipt.get("route_count", 0),
                    "bytes": receipt.get("bytes", 0),
                    "live_after_s": round(time.time() - started, 2),
                    "posts": _imported_posts(deps, op_id),
                }
        time.sleep(0.2)
    return [
        results.get(
            site,
            {
                "site": site,
                "status": "timed out",
                "published": False,
                "routes": 0,
                "bytes": 0,
                "live_after_s": None,
                "posts": 0,
            },
        )
        for site in sites
    ]


def _flow_control_phase(
    deps: Dependencies, api: DemoApi, console: Console, site: str, timeout_s: float
) -> dict[str, Any]:
    """Backpressure and supersession, visibly: hold a site, queue publishes past its limit, release it."""
    from sitedispatch.domain.errors import Backpressure

    console.print(
        f"[bold]flow control[/]: {site} paused; publishes queued until its limit "
        f"({deps.settings.max_queued_per_site}) is reached"
    )
    api.operator.call("POST", f"/sites/{site}/pause", body={"reason": "demo: holding the queue"})
    accepted: list[str] = []
    refusal = None
    for n in range(deps.settings.max_queued_per_site + 1):
        try:
            accepted.append(api.submit("publish", site, {}, f"publish-{n}").operation_id)
        except Backpressure as error:
            refusal = error
            console.print(f"  refused (429, exit 75 in the CLI): {error}")
    api.operator.call("POST", f"/sites/{site}/resume", body={"reason": "demo: releasing the queue"})
    console.print(f"  {site} resumed: the older queued publishes are superseded by the newest")
    deadline = time.monotonic() + timeout_s
    final = []
    while time.monotonic() < deadline:
        final = [deps.operations.get(op_id) for op_id in accepted]
        if all(op is not None and op.status.terminal for op in final):
            break
        time.sleep(0.2)
    statuses = [op.status.value if op else "missing" for op in final]
    for op_id, status in zip(accepted, statuses, strict=True):
        console.print(f"  {op_id}  {status}")
    return {
        "accepted": len(accepted),
        "refused": refusal is not None,
        "retry_after_s": refusal.retry_after_s if refusal else None,
        "superseded": statuses.count("superseded"),
        "succeeded": statuses.count("succeeded"),
    }


def _dead_letter_phase(
    deps: Dependencies, api: DemoApi, console: Console, site: str, workdir: Path, timeout_s: float
) -> dict[str, Any]:
    """A poisoned input goes dead with evidence; the evidence's recovery command, with the file fixed, completes it."""
    from sitedispatch.local.synthetic import write_wxr

    good = workdir / "export.xml"
    write_wxr(good, posts=20, seed=11)
    broken = workdir / "export-truncated.xml"
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # an export cut off half way
    console.print(f"[bold]dead letters[/]: importing a truncated WXR export into {site}")
    op_id = api.submit("import", site, api.producer.upload(site, broken), f"import-{site}").operation_id
    op = _wait_terminal(deps, op_id, timeout_s)
    if op is None or op.status != Status.DEAD:
        return {"operation_id": op_id, "dead": False, "recovered": False}
    evidence = api.operator.call("GET", f"/dead-letters/{op_id}")
    console.print(
        f"  {op_id} is dead after {evidence['attempt']} attempt: {evidence['error_code']}: {evidence['error_message']}"
    )
    console.print(
        f"  evidence: s3://{deps.settings.bucket}/{evidence['key']} (input digest "
        f"{evidence['input_digest'][:12]}…, traceback digest {evidence['traceback_digest']})"
    )
    console.print(f"  recovery: [bold]{evidence['recovery_command']}[/]")
    fixed = api.operator.upload(site, good)
    report = api.operator.call(
        "POST",
        "/dead-letters/redrive",
        body={"operation_id": op_id, "input": fixed, "reason": "demo: re-exported the file"},
    )
    console.print(f"  redriven with the complete export ({report['dlq_messages_removed']} DLQ message removed)")
    final = _wait_terminal(deps, op_id, timeout_s)
    recovered = final is not None and final.status == Status.SUCCEEDED
    audit = api.operator.call("GET", "/audit", query={"target": op_id, "since_s": 3600})
    console.print(
        f"  {op_id}: {final.status.value if final else 'missing'} in epoch {final.epoch if final else '?'}"
        f"; audit: {[e['action'] + ':' + e['outcome'] for e in audit]}"
    )
    return {
        "operation_id": op_id,
        "dead": True,
        "error_code": evidence["error_code"],
        "recovery_command": evidence["recovery_command"],
        "recovered": recovered,
        "dlq_messages_removed": report["dlq_messages_removed"],
    }


def _wordpress_phase(
    deps: Dependencies,
    api: DemoApi,
    console: Console,
    workdir: Path,
    export: Path,
    timeout_s: float,
    wanted: bool | None,
) -> dict[str, Any]:
    """A real WordPress (Debian's packages): registered, provisioned, the demo's export imported through REST, then
    crawled into a publication."""
    from sitedispatch.domain.model import WORDPRESS_DRIVER
    from sitedispatch.local.wordpress import PACKAGES, LocalWordPress, missing_programs

    missing = missing_programs()
    if wanted is False or (wanted is None and missing):
        reason = "not asked for" if wanted is False else f"needs apt-get install {' '.join(PACKAGES)}"
        console.print(f"[dim]real WordPress site: skipped ({reason})[/]")
        return {"skipped": reason}
    site_id = "demo-wordpress"
    with LocalWordPress(workdir / "wordpress") as wordpress:
        wordpress.start_database()
        site = wordpress.add_site(site_id, title="Demo WordPress")
        console.print(
            f"[bold]a real WordPress[/] at {site.url} (MariaDB + php -S, the sitedispatch mu-plugin), "
            f"registered with driver wordpress"
        )
        registration = {
            "site_id": site_id,
            "driver": WORDPRESS_DRIVER,
            "url": site.url,
            "credential": site.credential_ref,
        }
        api.producer.call("POST", "/sites", body=registration)
        result: dict[str, Any] = {"url": site.url}
        for kind, params in (
            ("provision", {"title": "Demo WordPress", "admin_email": "admin@demo.example"}),
            ("import", api.producer.upload(site_id, export)),
        ):
            started = time.monotonic()
            op = api.submit(kind, site_id, params)
            done = _wait_terminal(deps, op.operation_id, timeout_s * 2)
            took = time.monotonic() - started
            commit = deps.commits.get(op.operation_id)
            result[kind] = {
                "status": done.status.value if done else "missing",
                "seconds": round(took, 1),
                "summary": commit.summary if commit else None,
            }
            console.print(
                f"  {kind}: {result[kind]['status']} in {took:.1f}s"
                + (
                    f" (attempt {done.attempt if done else '?'}); created {commit.summary.get('created')}, "
                    f"found {commit.summary.get('existing')}"
                    if commit and kind == "import"
                    else ""
                )
            )
        head = deps.sites.get(site_id)
        version = head.head_version if head else 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (
            (record := deps.sites.get(site_id)) is None or record.live_seq < version
        ):
            time.sleep(0.5)
        record = deps.sites.get(site_id)
        receipt = _receipt(deps, site_id, record.live_revision if record else None)
        result["published"] = bool(record and record.live_seq >= version and receipt)
        result["crawled_routes"] = receipt.get("route_count", 0)
        console.print(
            f"  publication {record.live_seq if record else '?'} live: {result['crawled_routes']} routes "
            f"crawled from WordPress; read one: sitedispatch sites read {site_id} /sample-page/"
        )
    return result


def _wait_terminal(deps: Dependencies, op_id: str, timeout_s: float) -> Operation | None:
    deadline = time.monotonic() + timeout_s
    op = deps.operations.get(op_id)
    while (op is None or not op.status.terminal) and time.monotonic() < deadline:
        time.sleep(0.2)
        op = deps.operations.get(op_id)
    return op


def _imported_posts(deps: Dependencies, operation_id: str) -> int:
    """The site's posts after an import (from its commit's summary); 0 for an operation that committed nothing."""
    commit = deps.commits.get(operation_id)
    return int(commit.summary.get("totals", {}).get("posts", 0)) if commit is not None else 0


def _receipt(deps: Dependencies, site: str, revision: str | None) -> dict[str, Any]:
    from sitedispatch.publication.live import receipt_key

    if revision is None:
        return {}
    return dict(json.loads(deps.blobs.get(receipt_key(site, revision))))


def _report_imports(console: Console, imports: list[dict[str, Any]]) -> None:
    table = Table(title="import + publication: every route of a site rendered in parallel")
    for column in ("site", "status", "posts", "routes live", "bytes", "live after (s)", "cron: one route/minute"):
        table.add_column(column)
    for i in imports:
        table.add_row(
            i["site"],
            i["status"],
            str(i["posts"]),
            str(i["routes"]),
            str(i["bytes"]),
            str(i["live_after_s"]),
            f"{i['routes']} min",
            style="green" if i["published"] else "red",
        )
    console.print(table)


def _follow(deps: Dependencies, ops: list[Operation], console: Console, timeout_s: float) -> list[Operation]:
    latest = {op.operation_id: op for op in ops}
    deadline = time.monotonic() + timeout_s
    latency = max(deps.settings.reference_latency_s, 0.1)
    with Progress(
        TextColumn("{task.description:<14}"),
        BarColumn(),
        TextColumn("{task.fields[status]:<10}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        tasks = {op.operation_id: progress.add_task(op.site_id, total=100, status=op.status.value) for op in ops}
        while time.monotonic() < deadline:
            for op_id in tasks:
                if not latest[op_id].status.terminal:
                    latest[op_id] = deps.operations.get(op_id) or latest[op_id]
                op = latest[op_id]
                done = 100 if op.status.terminal else PROGRESS.get(op.status, 0)
                if op.status == Status.RUNNING and op.started_at:
                    done = min(95, 20 + int(75 * (time.time() - op.started_at) / latency))
                progress.update(tasks[op_id], completed=done, status=op.status.value)
            if all(op.status.terminal for op in latest.values()):
                break
            time.sleep(0.1)
    return list(latest.values())


def _report(console: Console, runs: list[SiteRun], ours: float, cron: list[float], spread: float) -> None:
    table = Table(title="site queues: every site in its own lane")
    for column in ("site", "queued→started (s)", "duration (s)", "ready after (s)", "cron ready after (s)", "status"):
        table.add_column(column)
    for run, cron_done in zip(runs, cron, strict=True):
        table.add_row(
            run.site_id,
            f"{run.start_delay_s:.2f}",
            f"{run.duration_s:.2f}",
            f"{run.finished_after_s:.2f}",
            f"{cron_done:.0f}",
            run.status,
            style="green" if run.status == "succeeded" else "red",
        )
    console.print(table)
    console.print(
        f"starts spread over [bold]{spread:.2f}s[/]; whole fleet ready in [bold]{ours:.1f}s[/] "
        f"versus [bold]{max(cron):.0f}s[/] under the one-site-per-minute cron "
        f"([bold]{max(cron) / ours:.0f}x[/] sooner)"
    )
