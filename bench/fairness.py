"""Fairness under a noisy neighbour, measured on the local runtime: principal A (or tenant A of a control plane) has
`flood` interactive provisions accepted; principal B (or tenant B of the same control plane) submits one provision at
a time, `trials` times, and each one's wait (acceptance to the start of its attempt) is compared with the operation
time (the median of A's provisions, start to finish).

The lane has four environments and A's running cap is two, so A's share of the lane's queue is four: the rest of its
flood waits unsent (the by-waiting index), and B's message finds at most four of A's ahead of it. The acceptance
test runs this with a smaller flood (the size only changes what waits, not what is queued), `make bench` with 1,000.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Operation, Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime

from .simulation import percentile

PROVISION = {"title": "Fairness", "admin_email": "fairness@example.org"}
ENVIRONMENTS = 4  # of the interactive lane
RUNNING_CAP = 2  # A's (and B's) running cap: A's share of the lane's queue is twice that
LATENCY_S = 0.5  # the reference provision's simulated service time


def _terminal(deps: Dependencies, operation_id: str, timeout_s: float) -> Operation:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        op = deps.operations.get(operation_id)
        if op is not None and op.status.terminal:
            return op
        time.sleep(0.02)
    raise TimeoutError(f"{operation_id} did not finish within {timeout_s:.0f} s")


def noisy_neighbour(
    runtime: LocalRuntime,
    flood: int,
    trials: int,
    setenv: Callable[[str, str], None] = os.environ.__setitem__,
    tenants: bool = False,
) -> dict[str, Any]:
    """Run the scenario on `runtime` (a fresh one: this starts its cloud and the lane) and return its figures.
    `setenv` puts the cloud's environment where this process's clients read it (a test passes its monkeypatch's).
    `tenants`: A and B are two tenants (fairness keys) of one principal, a control plane's customers."""
    flooder, newcomer = (
        (("control-plane", "customer-a"), ("control-plane", "customer-b"))
        if tenants
        else (("tenant-a", None), ("tenant-b", None))
    )
    env = runtime.start_cloud(
        0,
        policy={
            "reference_latency_s": LATENCY_S,
            "max_running_per_principal": RUNNING_CAP,
            "max_outstanding_per_principal": 2 * flood,
        },
    )
    for key, value in env.items():
        setenv(key, value)
    deps = Dependencies(Settings()).warm()
    submitter = deps.submitter()

    def submit_a(n: int) -> Operation:
        return submitter.submit(
            kind="provision", site_id=f"flood-{n}", params=PROVISION, principal=flooder[0], tenant=flooder[1]
        ).operation

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        ops = list(pool.map(submit_a, range(flood)))
    submit_s = time.monotonic() - started

    runtime.start_worker("operations", ENVIRONMENTS)
    waits: list[float] = []
    outcomes: list[Status] = []
    for trial in range(trials):
        b = submitter.submit(
            kind="provision", site_id=f"tenant-b-{trial}", params=PROVISION, principal=newcomer[0], tenant=newcomer[1]
        ).operation
        done = _terminal(deps, b.operation_id, timeout_s=60)
        outcomes.append(done.status)
        waits.append(float(done.started_at or 0.0) - float(done.queued_at or done.created_at))

    current = [deps.operations.get(op.operation_id) for op in ops]
    durations = [
        float(op.finished_at) - float(op.started_at)
        for op in current
        if op is not None and op.status == Status.SUCCEEDED and op.finished_at and op.started_at
    ]
    operation_s = statistics.median(durations)
    p99 = percentile(waits, 99)
    return {
        "flood": flood,
        "same_principal": tenants,
        "trials": trials,
        "environments": ENVIRONMENTS,
        "running_cap": RUNNING_CAP,
        "waiting_at_submit": sum(1 for op in ops if op.waiting_for),
        "flood_submit_s": round(submit_s, 1),
        "flood_left_after": sum(1 for op in current if op is not None and not op.status.terminal),
        "operation_s": round(operation_s, 3),
        "wait_p50_s": round(percentile(waits, 50), 3),
        "wait_p99_s": round(p99, 3),
        "bound_s": round(2 * operation_s, 3),
        "met": p99 <= 2 * operation_s,
        "all_succeeded": all(status == Status.SUCCEEDED for status in outcomes),
        "waits_s": [round(w, 3) for w in waits],
    }
