"""`sitedispatch demo`: the local runtime, a fleet provisioned at once, and the cron round-robin it replaces."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sitedispatch.console import running_console
from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Operation, Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.demo_phases import (
    IMPORT_SITES,
    DemoApi,
    dead_letter_phase,
    demo_export,
    events_phase,
    flow_control_phase,
    import_phase,
    register_webhook,
    report_imports,
    webhooks_phase,
    wordpress_phase,
)
from sitedispatch.local.receiver import WebhookReceiver
from sitedispatch.local.supervisor import LocalRuntime

CRON_PERIOD_S = 60.0  # the replaced scheduler: one site (or one publication route) per minute
PROGRESS = {Status.ACCEPTED: 5, Status.QUEUED: 10, Status.RUNNING: 20}
WORKER_PROCESSES = 2
PUBLICATION_ENVIRONMENTS = 4


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
    hold: bool = False,
) -> int:
    """`wordpress`: include a real WordPress site (None: when this machine has the packages). `hold`: keep the
    runtime and the console up after the report, until Ctrl-C."""
    console = Console(stderr=as_json)
    console.width = max(console.width, 110)
    per_worker = math.ceil(n_sites / WORKER_PROCESSES)
    receiver = WebhookReceiver()
    with LocalRuntime(workdir) as runtime, receiver.serving() as hook_url, ExitStack() as later:
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
        # the API and the console first: their URL is what a person opens while the workers warm up
        api = DemoApi(runtime.start_api())
        board = later.enter_context(running_console(api.operator, caller=api.operator.identity or ""))
        console.print(f"[bold]watch it in the operator console[/]: {board.gate.url}", soft_wrap=True)
        runtime.start_workers(
            [("operations", per_worker, None, None, None) for _ in range(WORKER_PROCESSES)]
            + [
                ("bulk", IMPORT_SITES, None, None, None),
                ("publications", PUBLICATION_ENVIRONMENTS, None, None, None),
                ("events", 1, None, None, None),
                ("webhooks", 2, None, None, None),
            ]
        )
        endpoint_id = register_webhook(api, receiver, hook_url)
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
        imports = import_phase(deps, api, console, sites[:IMPORT_SITES], export, timeout_s)
        flow = flow_control_phase(deps, api, console, sites[-1], timeout_s)
        dead_letter = dead_letter_phase(deps, api, console, sites[IMPORT_SITES], workdir, timeout_s)
        told = events_phase(api, console, final, timeout_s)
        hooked = webhooks_phase(api, console, receiver, endpoint_id, final, timeout_s)
        real = wordpress_phase(deps, api, console, workdir, export, timeout_s, wordpress)
        phases = {
            "imports": imports,
            "flow_control": flow,
            "dead_letter": dead_letter,
            "events": told,
            "webhooks": hooked,
            "wordpress": real,
        }
        code = _summarize(console, final, t0, phases, as_json)
        if hold and not as_json:
            console.print(f"the fleet and the console ({board.gate.url}) stay up: Ctrl-C stops them", soft_wrap=True)
            cli = f".venv/bin/sitedispatch --env-file {runtime.env_file}"
            console.print("[bold]try next[/], in another terminal, against this fleet:")
            for line in (
                f"{cli} sites list --as operator",
                f"{cli} ops list --site {sites[0]} --as operator",
                f"{cli} dlq list --as operator",
                f"{cli} events tail --as demo",
            ):
                console.print(f"  {line}", soft_wrap=True, highlight=False)
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()
        else:
            console.print(
                "the fleet stopped with the demo. Next: `.venv/bin/sitedispatch local up` in one terminal, then the "
                "README's first walk in another (or `make demo` in a terminal: it keeps the fleet up)",
                soft_wrap=True,
            )

    return code


def _summarize(
    console: Console,
    final: list[Operation],
    t0: float,
    phases: dict[str, Any],
    as_json: bool,
) -> int:
    """The demo's report (a table, or JSON) and its exit code: 0 when every phase did what it shows."""
    n_sites = len(final)
    imports, flow, dead_letter = phases["imports"], phases["flow_control"], phases["dead_letter"]
    told, hooked, real = phases["events"], phases["webhooks"], phases["wordpress"]
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
    ok = ok and not told["missing"]
    ok = ok and not hooked["missing"] and hooked["all_verified"]
    summary = {
        "sites": n_sites,
        "all_succeeded": ok,
        "start_spread_s": round(spread, 3),
        "fleet_ready_s": round(ours, 3),
        "cron_fleet_ready_s": round(cron_total, 1),
        "speedup": round(cron_total / ours, 1),
        "runs": [r.__dict__ for r in runs],
        **phases,
    }
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _report(console, runs, ours, cron, spread)
        report_imports(console, imports)
    return 0 if ok else 1


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
