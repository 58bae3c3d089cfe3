"""One identity acting for many: what its admission costs and sustains. Prints its figures and writes them to
bench/results/control-plane.json (`make bench` runs it; `python -m bench.control_plane` alone).

- requests: AWS requests and write units of 500 provisions of new sites and of 500 publishes of known ones, sent
  as single submits and as one batch (counted with botocore hooks, as bench/requests.py counts);
- admission rate: provisions admitted per second by 16 threads in one process, on the strict local cloud (its
  transaction conflicts are AWS's), from one principal and from forty: one caller's counters must not be the limit;
- a 1,000-item batch of one principal through the local API (two requests of 500), admitted in how long;
- ten provisions for ten new sites as ten concurrent requests to the local API, from one principal and from ten,
  `ADMISSION_TRIALS` times each: how far apart they were admitted (first to last send), p50, p99 and the worst.
  The G1 test asserts the starts on every run; this is where the admission goal (within 0.5 s) is measured.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.settings import Settings
from sitedispatch.local.cloud import create_resources, in_process_cloud, local_environment
from sitedispatch.local.strict import STRICT
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.operations.batch import BatchItem, BatchSubmitter

from .requests import PRICES, RequestCounter
from .simulation import percentile
from .stamp import RESULTS, meta

PROVISION = {"title": "Control plane", "admin_email": "cp@example.org"}
ITEMS = 500
THREADS = 16
RATE_OPERATIONS = 400
STRICT_SEED = 3
ADMISSION_TRIALS = 20
ADMISSION_SITES = 10


def _counted(deps: Dependencies) -> RequestCounter:
    counter = RequestCounter()
    for client in (deps.sqs, deps.s3, deps.models.Operation._get_connection().connection.client):
        client.meta.events.register("provide-client-params.*.*", counter)
    return counter


def _figures(counter: RequestCounter, seconds: float) -> dict[str, Any]:
    units = sum(counter.write_units.values())
    sends = counter.counts["sqs:SendMessage"] + counter.counts["sqs:SendMessageBatch"]
    return {
        "requests": sum(counter.counts.values()),
        "by_api": dict(sorted(counter.counts.items())),
        "transaction_items": counter.transact_items,
        "write_units": units,
        "dollars_writes_and_sends": round(
            units * PRICES["dynamodb_write_unit"] + sends * PRICES["sqs_fifo_request"], 6
        ),
        "seconds": round(seconds, 2),
    }


def requests_per_way() -> dict[str, Any]:
    """500 provisions of new sites, then 500 publishes of them, as singles and as one batch: requests counted."""
    out: dict[str, Any] = {}
    with in_process_cloud() as endpoint:
        for way in ("singles", "batch"):
            settings = create_resources(endpoint, prefix=f"cp{way[0]}", max_running_per_principal=1000)
            os.environ.update(local_environment(settings, endpoint))
            deps = Dependencies(Settings()).warm()
            submitter = deps.submitter()
            for kind, params in (("provision", PROVISION), ("publish", {})):
                items = [BatchItem(kind, f"site-{n:04d}", f"{kind}-{n}", params) for n in range(ITEMS)]
                counter = _counted(deps)
                started = time.monotonic()
                if way == "batch":
                    answers = BatchSubmitter(submitter).submit("control-plane", items)
                    assert all(a.submitted is not None and a.submitted.created for a in answers)
                else:
                    for item in items:
                        submitter.submit(
                            kind=item.kind,
                            site_id=item.site_id,
                            principal="control-plane",
                            params=item.params,
                            idempotency_key=item.idempotency_key,
                        )
                counter.paused = True
                out[f"{kind} x{ITEMS}, {way}"] = _figures(counter, time.monotonic() - started)
    return out


def admission_rate(principals: int) -> dict[str, Any]:
    """Provisions of new sites admitted per second, THREADS at once, spread over `principals` callers, strict."""
    with in_process_cloud() as endpoint:
        settings = create_resources(endpoint, prefix=f"rate{principals}", max_running_per_principal=1000)
        os.environ.update(local_environment(settings, endpoint))
        deps = Dependencies(Settings()).warm()
        submitter = deps.submitter()
        STRICT.enable(STRICT_SEED)
        try:
            started = time.monotonic()
            with ThreadPoolExecutor(THREADS) as pool:
                list(
                    pool.map(
                        lambda n: submitter.submit(
                            kind="provision",
                            site_id=f"rate-{n:04d}",
                            principal=f"caller-{n % principals}",
                            params=PROVISION,
                        ),
                        range(RATE_OPERATIONS),
                    )
                )
            seconds = time.monotonic() - started
            conflicts = dict(STRICT.conflicts)
        finally:
            STRICT.disable()
    return {
        "principals": principals,
        "operations": RATE_OPERATIONS,
        "threads": THREADS,
        "seconds": round(seconds, 2),
        "per_s": round(RATE_OPERATIONS / seconds, 1),
        "conflicts": conflicts,
    }


def batch_through_the_api(items: int = 1000) -> dict[str, Any]:
    """A control plane's 1,000 provisions of new sites, for 100 tenants, in two batch requests to the local API."""
    from sitedispatch.client import ApiClient

    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "cp") as runtime:
        runtime.start_cloud(0, policy={"max_running_per_principal": 1000})
        url = runtime.start_api()
        client = ApiClient(url, identity="control-plane", timeout_s=120)
        lines = [
            {
                "kind": "provision",
                "site_id": f"fleet-{n:04d}",
                "params": PROVISION,
                "idempotency_key": f"p{n}",
                "tenant": f"customer-{n % 100}",
            }
            for n in range(items)
        ]
        started = time.monotonic()
        statuses: list[int] = []
        for start in range(0, items, ITEMS):
            answer = client.call("POST", "/operations/batch", body={"items": lines[start : start + ITEMS]})
            statuses += [item["status"] for item in answer["items"]]
        seconds = time.monotonic() - started
    return {
        "items": items,
        "requests": -(-items // ITEMS),
        "seconds": round(seconds, 2),
        "accepted": statuses.count(202),
    }


def concurrent_admission(trials: int = ADMISSION_TRIALS) -> dict[str, Any]:
    """Ten concurrent requests, each a provision of a new site, `trials` times from one principal and from ten: the
    spread of their admissions (each operation's send time, `queued_at`), as G1 measures it through the API."""
    from sitedispatch.client import ApiClient

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "g1") as runtime:
        # no workers run: every message stays sent, so the running cap must let all of them be sent
        env = runtime.start_cloud(0, policy={"max_running_per_principal": 1000})
        url = runtime.start_api()
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            deps = Dependencies(Settings()).warm()
            for many in (False, True):
                clients = [
                    ApiClient(url, identity=f"producer-{n}" if many else "producer") for n in range(ADMISSION_SITES)
                ]
                spreads = []
                for trial in range(trials):
                    sites = [f"g1-{int(many)}-{trial:02d}-{n:02d}" for n in range(ADMISSION_SITES)]
                    with ThreadPoolExecutor(ADMISSION_SITES) as pool:
                        replies = list(
                            pool.map(
                                lambda c, s: c.call(
                                    "POST", "/operations", body={"kind": "provision", "site_id": s, "params": PROVISION}
                                ),
                                clients,
                                sites,
                            )
                        )
                    ops = [deps.operations.get(reply["operation_id"]) for reply in replies]
                    queued = [op.queued_at for op in ops if op is not None and op.queued_at is not None]
                    assert len(queued) == ADMISSION_SITES, "every request admitted and sent"
                    spreads.append(max(queued) - min(queued))
                out["ten principals" if many else "one principal"] = {
                    "trials": trials,
                    "p50_s": round(percentile(spreads, 50), 3),
                    "p99_s": round(percentile(spreads, 99), 3),
                    "max_s": round(max(spreads), 3),
                    "within_0_5_s": sum(1 for s in spreads if s < 0.5),
                }
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return out


def measure() -> dict[str, Any]:
    saved = dict(os.environ)
    try:
        ways = requests_per_way()
        one, forty = admission_rate(1), admission_rate(40)
        batch = batch_through_the_api()
        admission = concurrent_admission()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    ratio = round(one["per_s"] / forty["per_s"], 2)
    for name, figures in ways.items():
        print(
            f"control plane: {name}: {figures['requests']} requests, {figures['write_units']} write units, "
            f"{figures['seconds']} s",
            flush=True,
        )
    print(
        f"control plane: admission on the strict cloud, {THREADS} threads: one principal {one['per_s']}/s, forty "
        f"{forty['per_s']}/s (ratio {ratio}); a 1,000-item batch through the local API in {batch['seconds']} s",
        flush=True,
    )
    for who, figures in admission.items():
        print(
            f"control plane: ten concurrent requests through the local API, {who}: admitted over p50 "
            f"{figures['p50_s']} s, p99 {figures['p99_s']} s, worst {figures['max_s']} s "
            f"({figures['within_0_5_s']} of {figures['trials']} within 0.5 s)",
            flush=True,
        )
    return {
        "requests": ways,
        "admission": {"one_principal": one, "forty_principals": forty, "ratio": ratio},
        "batch_through_the_api": batch,
        "concurrent_requests_admission": admission,
    }


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "control-plane.json").write_text(json.dumps({**meta(), **measure()}, indent=2))


if __name__ == "__main__":
    main()
