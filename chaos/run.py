"""`make chaos SEEDS=N` (or `SEED=S` to replay one): seeded chaos runs on the local runtime; prints runs, faults by
type, operations and violations, and for any violation the seed and the command that replays it. Results go to
chaos/results/. Exit 1 if any run violated an invariant."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path

from .campaign import PROFILES, RunReport, run_seed

RESULTS = Path(__file__).resolve().parent / "results"


def replay_command(seed: int, profile: str) -> str:
    return f"make chaos SEED={seed} PROFILE={profile}"


def _one(job: tuple[int, str]) -> tuple[RunReport, Path]:
    seed, profile = job
    workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    return run_seed(seed, profile, workdir), workdir


def _print(report: RunReport, profile: str, workdir: Path, keep: bool) -> None:
    status = "ok" if not report.violations else f"{len(report.violations)} VIOLATION(S)"
    print(
        f"seed {report.seed:>4}: {status}; {report.figures.get('operations', 0)} operations, faults "
        f"{dict(sorted(report.faults.items()))}, settled in {report.settled_s}s, wall {report.wall_s}s "
        f"{report.phases}",
        flush=True,
    )
    for violation in report.violations:
        print(f"    {violation}", flush=True)
    if report.violations:
        print(f"    replay: {replay_command(report.seed, profile)}   (logs: {workdir})", flush=True)
    elif not keep:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=10, help="how many runs (seeds first..first+N-1)")
    parser.add_argument("--first", type=int, default=1, help="first seed")
    parser.add_argument("--seed", type=int, help="replay exactly this seed")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="full")
    parser.add_argument("--keep", action="store_true", help="keep each run's logs")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each its own cloud and workers)")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    started = time.monotonic()
    reports: list[RunReport] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=get_context("spawn")) as pool:
        for report, workdir in pool.map(_one, [(seed, args.profile) for seed in seeds]):
            reports.append(report)
            _print(report, args.profile, workdir, keep=args.keep)
    faults: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    for report in reports:
        faults.update(report.faults)
        actions.update(report.actions)
    violating = [r for r in reports if r.violations]
    summary = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": platform.platform(),
        "profile": args.profile,
        "runs": len(reports),
        "seeds": seeds,
        "operations": sum(r.figures.get("operations", 0) for r in reports),
        "commits": sum(r.figures.get("commits", 0) for r in reports),
        "faults": dict(sorted(faults.items())),
        "actions": dict(sorted(actions.items())),
        "violations": sum(len(r.violations) for r in reports),
        "violating_seeds": [
            {"seed": r.seed, "violations": r.violations, "replay": replay_command(r.seed, args.profile)}
            for r in violating
        ],
        "wall_s": round(time.monotonic() - started, 1),
        "settle_s_max": max((r.settled_s or 0.0 for r in reports), default=0.0),
    }
    print(json.dumps({k: v for k, v in summary.items() if k not in {"seeds", "violating_seeds"}}, indent=1))
    if violating:
        print("violating seeds (replay each):")
        for r in violating:
            print(f"  {replay_command(r.seed, args.profile)}")
    RESULTS.mkdir(exist_ok=True)
    name = f"chaos-{args.profile}-{seeds[0]}-{seeds[-1]}.json"
    (RESULTS / name).write_text(json.dumps({**summary, "runs_detail": [r.as_dict() for r in reports]}, indent=1))
    return 1 if violating else 0


if __name__ == "__main__":
    sys.exit(main())
