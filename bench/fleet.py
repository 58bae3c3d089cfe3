"""Fleet readiness: the cron round-robin against site queues, modelled for 10 to 10,000 sites and validated against
the local runtime at 10 and 50 sites. Writes bench/results/fleet.json and fleet.png."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime

from .simulation import (
    AwsLimits,
    Durations,
    cron_fleet_provision_s,
    cron_publication_latencies_s,
    percentile,
    queue_fleet_provision_s,
    queue_publication_latencies_s,
)

FLEETS = (10, 100, 1_000, 10_000)
ROUTES = (1, 50)
# The AWS projection's assumptions (stated, not measured here): a provision's work as in the demo, S3 writes of
# a rendered route at ~20 ms with the chunk's PUTs overlapped, the event source mapping's cap from the stack default.
AWS = AwsLimits(max_concurrency=20)
AWS_DURATIONS = Durations(operation_s=2.0, publish_operation_s=0.3, plan_s=0.2, route_s=0.02, finish_s=0.2, hop_s=0.03)
TOLERANCE = 0.25


def model_sweep(limits: AwsLimits = AWS, durations: Durations = AWS_DURATIONS) -> list[dict[str, Any]]:
    rows = []
    for n in FLEETS:
        row: dict[str, Any] = {
            "sites": n,
            "queue_fleet_ready_s": round(queue_fleet_provision_s(n, limits, durations), 1),
            "cron_fleet_ready_s": round(cron_fleet_provision_s(n, durations), 1),
        }
        for routes in ROUTES:
            queue = queue_publication_latencies_s(n, routes, limits, durations)
            cron = cron_publication_latencies_s(n, routes, durations)
            row[f"queue_publish_{routes}_p50_s"] = round(percentile(queue, 50), 2)
            row[f"queue_publish_{routes}_p99_s"] = round(percentile(queue, 99), 2)
            row[f"cron_publish_{routes}_p50_s"] = round(percentile(cron, 50), 1)
            row[f"cron_publish_{routes}_p99_s"] = round(percentile(cron, 99), 1)
        rows.append(row)
    return rows


def measure_fleet(
    workdir: Path, n_sites: int, workers: int = 2, environments: int = 5, latency_s: float = 2.0
) -> dict[str, Any]:
    """Provision `n_sites` at once on the local runtime; the measured makespan and per-operation figures."""
    with LocalRuntime(workdir / f"fleet-{n_sites}") as runtime:
        env = runtime.start_cloud(0, policy={"reference_latency_s": latency_s})
        runtime.start_workers([("operations", environments, None, None, None) for _ in range(workers)])
        os.environ.update(env)
        deps = Dependencies(Settings()).warm()
        submitter = deps.submitter()
        started = time.time()
        ops = [
            submitter.submit(
                kind="provision",
                site_id=f"fleet-{i:04d}",
                principal="bench",
                params={"title": "Fleet", "admin_email": "fleet@example.org"},
            ).operation
            for i in range(n_sites)
        ]
        deadline = time.monotonic() + 60 + 10 * n_sites
        final = []
        while time.monotonic() < deadline:
            final = [deps.operations.get(op.operation_id) for op in ops]
            if all(op is not None and op.status.terminal for op in final):
                break
            time.sleep(0.2)
        done = [op for op in final if op is not None and op.status == Status.SUCCEEDED]
        durations = [(op.finished_at or 0) - (op.started_at or 0) for op in done]
        hops = [(op.started_at or 0) - (op.queued_at or op.created_at) for op in done[: workers * environments]]
        return {
            "sites": n_sites,
            "succeeded": len(done),
            "concurrency": workers * environments,
            "measured_fleet_ready_s": round(max((op.finished_at or 0) for op in done) - started, 2),
            "operation_s_median": round(statistics.median(durations), 3),
            "first_wave_wait_s_median": round(statistics.median(hops), 3),
            "submit_s": round(max(op.created_at for op in ops) - started, 2),
            "arrivals_s": [round(op.created_at - started, 3) for op in ops],
        }


def validate(workdir: Path, fleets: tuple[int, ...] = (10, 50)) -> list[dict[str, Any]]:
    """Measured against modelled, with the model given only the local runtime's parameters: its concurrency, the
    measured median operation time (which includes each environment's first invocation: an environment starts
    as Lambda's does, its module imported and nothing else) and queue hop."""
    rows = []
    for n in fleets:
        measured = measure_fleet(workdir, n)
        limits = AwsLimits(
            max_concurrency=measured["concurrency"], cold_start_s=0.0, initial_environments=measured["concurrency"]
        )
        durations = Durations(operation_s=measured["operation_s_median"], hop_s=measured["first_wave_wait_s_median"])
        # the model is given the same arrivals as the runtime (each submit's time), not "all at t=0 plus the
        # submit time": operations start while later ones are still being submitted
        modelled = queue_fleet_provision_s(n, limits, durations, arrivals=measured["arrivals_s"])
        error = abs(modelled - measured["measured_fleet_ready_s"]) / measured["measured_fleet_ready_s"]
        rows.append(
            {
                **measured,
                "modelled_fleet_ready_s": round(modelled, 2),
                "relative_error": round(error, 3),
                "within_tolerance": error <= TOLERANCE,
            }
        )
        print(
            f"fleet {n}: measured {measured['measured_fleet_ready_s']} s, modelled {modelled:.2f} s "
            f"({error:.0%} apart; tolerance {TOLERANCE:.0%})",
            flush=True,
        )
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sites = [r["sites"] for r in rows]
    figure, (ready, publish) = plt.subplots(1, 2, figsize=(11, 4.2))
    ready.plot(sites, [r["cron_fleet_ready_s"] / 3600 for r in rows], "o-", label="minute cron, round-robin")
    ready.plot(sites, [r["queue_fleet_ready_s"] / 3600 for r in rows], "s-", label="site FIFO queues + Lambda")
    ready.set(
        xscale="log",
        yscale="log",
        xlabel="sites",
        ylabel="hours until every site is provisioned",
        title="fleet provisioning",
    )
    for routes, style in ((1, "--"), (50, "-")):
        publish.plot(
            sites,
            [r[f"cron_publish_{routes}_p99_s"] / 3600 for r in rows],
            "o" + style,
            label=f"cron, {routes} route(s), p99",
        )
        publish.plot(
            sites,
            [r[f"queue_publish_{routes}_p99_s"] / 3600 for r in rows],
            "s" + style,
            label=f"queues, {routes} route(s), p99",
        )
    publish.set(
        xscale="log",
        yscale="log",
        xlabel="sites (all publishing at once)",
        ylabel="hours from request to live (p99)",
        title="publication",
    )
    for axes in (ready, publish):
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def model_parameters() -> dict[str, Any]:
    return {"aws_limits": asdict(AWS), "durations": asdict(AWS_DURATIONS)}


def capacity(costs: dict[str, Any], kind: str = "provision") -> list[dict[str, Any]]:
    """Sustainable operations per second of the deployed stack and the limit that binds, for operations shaped as
    the measured `kind` (its requests and write units from bench/requests.py) taking AWS_DURATIONS' time."""
    from sitedispatch.domain.settings import Settings
    from stacks.functions import DEFAULT_MAX_CONCURRENCY

    from .simulation import binding, ceilings

    row = costs["per_operation"][kind]
    per_op: dict[str, int] = {}
    for part in ("submit", "functions"):
        for name, count in row[part]["requests"].items():
            per_op[name] = per_op.get(name, 0) + count
    routes = row["route_objects"]
    publication_s = AWS_DURATIONS.plan_s + routes * AWS_DURATIONS.route_s + AWS_DURATIONS.finish_s
    running_cap = int(Settings.model_fields["max_running_per_principal"].default)
    raised = {"operations": 1000, "publications": 1000}  # the most one event source mapping takes
    results = []
    for name, concurrency, principals, tenants in (
        ("deployed defaults, one principal", DEFAULT_MAX_CONCURRENCY, 1, 1),
        ("maximum concurrency raised to 1,000 per queue, one principal", raised, 1, 1),
        ("maximum concurrency raised to 1,000 per queue, one control plane with 1,000 tenants", raised, 1, 1000),
        ("maximum concurrency raised to 1,000 per queue, 100 principals", raised, 100, 1),
    ):
        rows = ceilings(
            per_op,
            row["write_units_by_table"],
            AWS_DURATIONS.operation_s,
            publication_s,
            concurrency,
            principals,
            tenants,
            running_cap,
        )
        limit, first = binding(rows), binding(rows, sustained=False)
        results.append(
            {
                "configuration": name,
                "sustainable_ops_per_s": round(limit.ops_per_s, 1),
                "binding_limit": limit.limit,
                "new_deployment_ops_per_s": round(first.ops_per_s, 1),
                "new_deployment_binding_limit": first.limit,
                "ceilings": [
                    {"limit": c.limit, "ops_per_s": round(c.ops_per_s, 1), "why": c.why, "ramp_up_only": c.initial}
                    for c in rows
                ],
            }
        )
        print(
            f"capacity ({name}): {limit.ops_per_s:.1f} operations/s sustained, bound by {limit.limit}; "
            f"{first.ops_per_s:.1f} in a new deployment's first half hour ({first.limit})",
            flush=True,
        )
    return results
