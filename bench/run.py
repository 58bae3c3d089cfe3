"""`make bench`: requests and cost per operation, cold start, the fleet model and its validation, end-to-end
throughput against a raw moto baseline, publication parallelism and memory, import memory. Prints figures and writes
them to bench/results/*.json (and fleet.png)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.settings import Settings
from sitedispatch.local.strict import STRICT, STRICT_SEED_ENV
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.publication.live import receipt_key

from . import (
    coldstart,
    console,
    control_plane,
    dependencies,
    emulators,
    fairness,
    fleet,
    import_steps,
    large_publication,
    latency,
    requests,
    stamp,
    sweeps,
    throughput,
)
from .polling import PROVISION, present, wait

RESULTS = stamp.RESULTS

STRICT_BENCH_SEED = 11  # the strict cloud's seed (its duplicate deliveries and delays), as the tests use
ONE_KEY = (
    "customer-a",
    "customer-a",
)  # the burst and the db:b site of one fairness key: the case a FIFO per key starved


@contextmanager
def scoped_environ() -> Iterator[None]:
    """Whatever a benchmark puts in this process's environment (a local cloud's settings) is gone after it."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes and all their descendants (live ones)."""
    import psutil

    total = 0.0
    for pid in pids:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                continue
    return total


def asset_size() -> dict[str, Any]:
    """The Lambda asset as `make synth` bundles it (Docker-free, arm64 wheels): files, bytes, zipped bytes."""
    import shutil

    from stacks.bundling import cached_bundle

    bundle = cached_bundle()
    files = [p for p in bundle.rglob("*") if p.is_file()]
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(shutil.make_archive(str(Path(tmp) / "asset"), "zip", bundle))
        zipped = archive.stat().st_size
    unzipped = sum(p.stat().st_size for p in files)
    print(
        f"Lambda asset: {len(files)} files, {unzipped / 1e6:.1f} MB unzipped, {zipped / 1e6:.1f} MB zipped "
        f"(limit 250 MB unzipped)",
        flush=True,
    )
    return {"files": len(files), "unzipped_bytes": unzipped, "zipped_bytes": zipped}


def provisioned(deps: Dependencies, site: str) -> None:
    deps.submitter().submit(kind="provision", site_id=site, principal="bench", params=PROVISION)
    wait(lambda: (s := deps.sites.get(site)) is not None and s.head_version == 1, 60, f"{site} provisioned")


@contextmanager
def measuring_runtime(workdir: Path, *queues: str) -> Iterator[tuple[LocalRuntime, dict[str, str], Dependencies]]:
    """A local runtime with long function timeouts and one worker per queue, and dependencies pointing at it."""
    with LocalRuntime(workdir) as runtime:
        env = runtime.start_cloud(0, function_timeout_s=900)
        for queue in queues:
            runtime.start_worker(queue, 1)
        os.environ.update(env)
        yield runtime, env, Dependencies(Settings()).warm()


def child_report(env: dict[str, str], module: str, *args: str, timeout: float = 1800) -> dict[str, Any]:
    """Run a measuring child process (its own peak RSS); its last output line is a JSON report."""
    child = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=timeout,
    )
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def import_rss(workdir: Path, megabytes: list[int]) -> list[dict[str, Any]]:
    """Peak RSS of a worker process importing generated WXR files of the given sizes."""
    out = []
    with measuring_runtime(workdir / "import", "operations") as (runtime, env, deps):
        for mb in megabytes:
            site = f"rss-{mb}mb"
            provisioned(deps, site)
            runtime.stop(next(c for c in runtime.children if c.name.startswith("worker-operations")))
            with tempfile.TemporaryDirectory() as tmp:
                wxr = Path(tmp) / "big.xml"
                counts = write_wxr(wxr, target_bytes=mb * 1024 * 1024, seed=mb)
                submitter = deps.submitter()
                op = submitter.submit(
                    kind="import", site_id=site, principal="bench", params=submitter.stage_upload(site, wxr, "bench")
                ).operation
            report = child_report(env, "bench.import_worker", op.operation_id, site)
            out.append({"wxr_mb": mb, "posts": counts["posts"], **report})
            print(
                f"import {mb} MB ({counts['posts']} posts): {report['seconds']} s, peak RSS "
                f"{report['peak_rss_mb']} MB, {report['outcome']}",
                flush=True,
            )
            runtime.start_worker("operations", 1)
    return out


def publication_rss(workdir: Path, route_targets: list[int]) -> list[dict[str, Any]]:
    """Peak RSS of one process running a whole publication (plan, every chunk, finish) of ~N routes."""
    out = []
    with measuring_runtime(workdir / "publication-rss", "operations", "bulk") as (_, env, deps):
        for target in route_targets:
            site = f"pub-rss-{target}"
            provisioned(deps, site)
            with tempfile.TemporaryDirectory() as tmp:
                wxr = Path(tmp) / "posts.xml"
                write_wxr(wxr, posts=int(target * 0.72), seed=target)
                submitter = deps.submitter()
                submitter.submit(
                    kind="import", site_id=site, principal="bench", params=submitter.stage_upload(site, wxr, "bench")
                )
            wait(
                lambda site=site: (s := deps.sites.get(site)) is not None and s.head_version == 2,
                900,
                f"{site} imported",
            )
            report = child_report(env, "bench.publish_worker", site, "2")
            publication = present(deps.publications.get(site, 2))
            receipt = json.loads(deps.blobs.get(receipt_key(site, publication.revision_id)))
            out.append({"routes": receipt["route_count"], **report})
            print(
                f"publication of {receipt['route_count']} routes ({report['chunks']} chunks) in one process: "
                f"{report['seconds']} s, peak RSS {report['peak_rss_mb']} MB",
                flush=True,
            )
    return out


def publication_parallelism(workdir: Path, routes_target: int, workers: list[int]) -> list[dict[str, Any]]:
    """Wall time of one publication of ~routes_target routes with N publication environments."""
    out = []
    for n in workers:
        with LocalRuntime(workdir / f"publish-{n}") as runtime:
            env = runtime.start_cloud(0)
            runtime.start_worker("operations", 1)
            runtime.start_worker("bulk", 1)
            os.environ.update(env)
            deps = Dependencies(Settings()).warm()
            site = f"pub-{n}"
            first = runtime.start_worker("publications", 1, name="first-publication")
            provisioned(deps, site)
            wait(lambda deps=deps, site=site: present(deps.sites.get(site)).live_seq == 1, 60, "first publication")
            runtime.stop(first)
            workers_up = [runtime.start_worker("publications", 1) for _ in range(n)]  # up before the publication
            cloud = next(c for c in runtime.children if c.name == "cloud")
            cpu_before = {"cloud": cpu_seconds([cloud.pid]), "workers": cpu_seconds([w.pid for w in workers_up])}
            with tempfile.TemporaryDirectory() as tmp:
                wxr = Path(tmp) / "posts.xml"
                # singles + home pages + archives: about 1.4 routes per post with 20 categories and 50 tags
                write_wxr(wxr, posts=int(routes_target * 0.72), seed=5)
                submitter = deps.submitter()
                submitter.submit(
                    kind="import", site_id=site, principal="bench", params=submitter.stage_upload(site, wxr, "bench")
                )
            wait(
                lambda deps=deps, site=site: (s := deps.sites.get(site)) is not None and s.live_seq == 2,
                900,
                "publication live",
            )
            cpu = {
                "cloud": cpu_seconds([cloud.pid]) - cpu_before["cloud"],
                "workers": cpu_seconds([w.pid for w in workers_up]) - cpu_before["workers"],
            }
            publication = present(deps.publications.get(site, 2))
            record = present(deps.sites.get(site))
            # from the commit that wrote the publication (outbox row) to the promotion, both durable timestamps
            seconds = present(record.live_at) - publication.created_at
            receipt = json.loads(deps.blobs.get(receipt_key(site, publication.revision_id)))
            out.append(
                {
                    "workers": n,
                    "routes": receipt["route_count"],
                    "chunks": publication.total_chunks,
                    "seconds": round(seconds, 2),
                    "cpu_seconds_moto": round(cpu["cloud"], 2),
                    "cpu_seconds_workers": round(cpu["workers"], 2),
                }
            )
            print(
                f"publication of {receipt['route_count']} routes in {publication.total_chunks} chunks with {n} "
                f"worker(s): {seconds:.2f} s; CPU moto {cpu['cloud']:.2f} s, workers {cpu['workers']:.2f} s "
                f"(includes the import before it)",
                flush=True,
            )
    return out


def measure_dependencies(meta: dict[str, Any]) -> None:
    """bench/results/dependencies.json: 300 sites of one key on a capped, rated dependency and another's site of
    the same key; the short cases on two keys and on the strict cloud (`python -m bench.run --only dependencies`)."""
    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "dependencies") as runtime, scoped_environ():
        shared = dependencies.shared_dependency(runtime, 300, 10, 20, tenants=ONE_KEY)
    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "two-keys") as runtime, scoped_environ():
        two_keys = dependencies.shared_dependency(runtime, 16, 2, 20, cap=2, rate=(60, 60.0, 3))
    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "strict") as runtime, scoped_environ():
        os.environ[STRICT_SEED_ENV] = str(STRICT_BENCH_SEED)  # the local cloud behaves as AWS does where moto is kinder
        STRICT.enable(STRICT_BENCH_SEED)
        try:
            strict = dependencies.shared_dependency(runtime, 16, 2, 20, cap=2, rate=(60, 60.0, 3), tenants=ONE_KEY)
        finally:
            STRICT.disable()
    (RESULTS / "dependencies.json").write_text(
        json.dumps({**meta, **shared, "two_keys_short": two_keys, "strict_short": strict}, indent=2)
    )
    print(
        f"dependencies, strict cloud: 16 sites on db:a (cap 2), one key; a db:b site waited "
        f"p50 {strict['b_wait_p50_s']} s p99 {strict['b_wait_p99_s']} s (bound {strict['b_bound_s']} s); "
        f"at most {strict['max_running_a']} running",
        flush=True,
    )
    print(
        f"dependencies, two keys: 16 sites on db:a (cap 2); a db:b site of another key waited "
        f"p50 {two_keys['b_wait_p50_s']} s p99 {two_keys['b_wait_p99_s']} s (bound {two_keys['b_bound_s']} s)",
        flush=True,
    )
    print(
        f"dependencies: 300 sites on db:a (cap 4, 20/min burst 5), one key: at most {shared['max_running_a']} running, "
        f"{shared['most_starts_in_a_period']} starts in a minute (bound {shared['starts_bound']}); a db:b site "
        f"waited p99 {shared['b_wait_p99_s']} s (bound {shared['b_bound_s']} s); {shared['deferrals_per_s']} "
        "deferrals a second",
        flush=True,
    )


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--import-mb", type=int, nargs="*", default=[10, 100])
    parser.add_argument("--steps-mb", type=int, default=100, help="WXR size of the imports-in-steps run (0: none)")
    parser.add_argument("--steps-timeout", type=float, default=120.0, help="its function timeout, seconds")
    parser.add_argument(
        "--large-site-posts", type=int, default=300_000, help="posts of the site ten posts are imported into (0: none)"
    )
    parser.add_argument(
        "--large-publication-posts",
        type=int,
        default=40_000,
        help="posts of the site published on `local up`'s runtime beside small sites (0: none)",
    )
    parser.add_argument("--routes", type=int, default=500)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--publish-routes", type=int, nargs="*", default=[500, 5000])
    parser.add_argument("--throughput-workers", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--throughput-ops", type=int, default=60)
    parser.add_argument("--fairness-flood", type=int, default=1000, help="one principal's accepted provisions")
    parser.add_argument("--fairness-trials", type=int, default=20, help="another principal's provisions, one by one")
    parser.add_argument(
        "--validate-fleets",
        type=int,
        nargs="*",
        default=[10, 50],
        help="fleet sizes at which the model is checked against the local runtime",
    )
    parser.add_argument("--only", choices=["dependencies"], help="run this one measurement only")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.only == "dependencies":
        measure_dependencies(stamp.meta())
    else:
        measure_all(args)


def measure_all(args: argparse.Namespace) -> None:
    meta = stamp.meta()
    costs = requests.main()
    (RESULTS / "requests.json").write_text(json.dumps({**meta, **costs}, indent=2))
    (RESULTS / "capacity.json").write_text(
        json.dumps({**meta, "kind": "provision", "rows": fleet.capacity(costs)}, indent=2)
    )
    (RESULTS / "sweeps.json").write_text(json.dumps({**meta, "quiet_fleet": sweeps.measure()}, indent=2))
    (RESULTS / "control-plane.json").write_text(json.dumps({**meta, **control_plane.measure()}, indent=2))
    (RESULTS / "console.json").write_text(json.dumps({**meta, **console.measure()}, indent=2))
    cold = coldstart.measure(dict(os.environ))
    (RESULTS / "coldstart.json").write_text(json.dumps({**meta, **cold, "asset": asset_size()}, indent=2))
    with tempfile.TemporaryDirectory() as tmp:
        local = latency.measure_local(Path(tmp))
        (RESULTS / "latency.json").write_text(
            json.dumps({**meta, "local": local, "aws_model": latency.model_aws(costs)}, indent=2)
        )
    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "fairness") as runtime, scoped_environ():
        # (its policy, a running cap of 2, must not reach the runtimes after it: the fleet check ran 20x slower)
        fair = fairness.noisy_neighbour(runtime, args.fairness_flood, args.fairness_trials)
    with tempfile.TemporaryDirectory() as tmp, LocalRuntime(Path(tmp) / "fairness") as runtime, scoped_environ():
        same = fairness.noisy_neighbour(runtime, args.fairness_flood, args.fairness_trials, tenants=True)
    (RESULTS / "fairness.json").write_text(json.dumps({**meta, **fair, "tenants_of_one_principal": same}, indent=2))
    for figures, who in ((fair, "principal"), (same, "tenant of one control plane")):
        print(
            f"fairness: {figures['flood']} of one {who}'s provisions accepted, another's waited p50 "
            f"{figures['wait_p50_s']} s p99 {figures['wait_p99_s']} s over {figures['trials']} trials (bound: two "
            f"operation times, {figures['bound_s']} s): {'met' if figures['met'] else 'NOT met'}",
            flush=True,
        )
    measure_dependencies(meta)
    with tempfile.TemporaryDirectory() as tmp:
        rows = fleet.model_sweep()
        validation = fleet.validate(Path(tmp), tuple(args.validate_fleets)) if args.validate_fleets else []
        fleet.plot(rows, RESULTS / "fleet.png")
        (RESULTS / "fleet.json").write_text(
            json.dumps({**meta, "model": fleet.model_parameters(), "sweep": rows, "validation": validation}, indent=2)
        )
        for row in rows:
            print(
                f"fleet {row['sites']:>6}: every site provisioned in {row['queue_fleet_ready_s']} s "
                f"(cron {row['cron_fleet_ready_s']} s); 50-route publication p99 "
                f"{row['queue_publish_50_p99_s']} s (cron {row['cron_publish_50_p99_s']} s)",
                flush=True,
            )
        if args.workers:
            publication = publication_parallelism(Path(tmp), args.routes, args.workers)
            by = {r["workers"]: r["seconds"] for r in publication}
            ratio = round(by[max(by)] / by[min(by)], 3) if len(by) > 1 else None
            (RESULTS / "publication.json").write_text(
                json.dumps({**meta, "runs": publication, "ratio_most_to_fewest": ratio}, indent=2)
            )
            print(f"publication time ratio {max(by)} workers / {min(by)} worker: {ratio}")
        if args.throughput_workers:
            tp = throughput.measure(Path(tmp), args.throughput_workers, args.throughput_ops)
            (RESULTS / "throughput.json").write_text(json.dumps({**meta, **tp}, indent=2))
            rates = emulators.measure()  # which of those figures are the emulator's (moto, and LocalStack if installed)
            (RESULTS / "emulators.json").write_text(json.dumps({**meta, **rates}, indent=2))
        if args.publish_routes:
            memory = publication_rss(Path(tmp), args.publish_routes)
            (RESULTS / "publication-memory.json").write_text(json.dumps({**meta, "runs": memory}, indent=2))
        if args.import_mb:
            imports = import_rss(Path(tmp), args.import_mb)
            (RESULTS / "import.json").write_text(json.dumps({**meta, "runs": imports}, indent=2))
        if args.steps_mb:
            stepped = import_steps.measure(Path(tmp), args.steps_mb, args.steps_timeout)
            (RESULTS / "import-steps.json").write_text(json.dumps({**meta, **stepped}, indent=2))
        if args.large_site_posts:
            large = import_steps.ten_into_large_site(Path(tmp), args.large_site_posts, args.steps_timeout)
            (RESULTS / "import-large-site.json").write_text(json.dumps({**meta, **large}, indent=2))
        if args.large_publication_posts:
            with scoped_environ():
                wide = large_publication.report(Path(tmp) / "large-publication", args.large_publication_posts)
            (RESULTS / "publication-large-site.json").write_text(json.dumps({**meta, **wide}, indent=2))


if __name__ == "__main__":
    main()
