"""`make sim`: run seeded schedules of the simulation and report; `make sim SEED=n` replays one with its trace."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
PROGRESS_EVERY = 20  # chunks of 50 seeds between two progress lines
FULL_TRACE = 10**7  # a replay keeps every step
HASH_SEED = "0"  # str hashing decides set orders: fixed, or a seed would not replay in another process


def fixed_hash_seed() -> None:
    """Run again under PYTHONHASHSEED=0 unless already so."""
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        os.environ["PYTHONHASHSEED"] = HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "sim.run", *sys.argv[1:]])


def run_seeds(seeds: list[int], check_every: int) -> list[dict[str, Any]]:
    from .fleet import quiet

    with quiet():
        return [run_seed(seed, bool(check_every) and seed % check_every == 0) for seed in seeds]


def run_seed(seed: int, twice: bool) -> dict[str, Any]:
    """One schedule's row of the report; `twice`: run again, and a different digest is a violation."""
    from .fleet import Outcome, Simulation

    started = time.perf_counter()
    try:
        outcome = Simulation(seed).run()
    except Exception as exc:  # the simulation itself broke on this seed: reported with it, the campaign goes on
        outcome = Outcome(seed, violations=[f"the simulation stopped: {type(exc).__name__}: {exc}"])
    took = time.perf_counter() - started
    violations = list(outcome.violations)
    if twice:
        again = Simulation(seed).run().digest
        if again != outcome.digest:
            violations.append(f"a seed replays: digest {outcome.digest[:12]} then {again[:12]}")
    return {
        "seed": seed,
        "digest": outcome.digest,
        "steps": outcome.steps,
        "operations": outcome.operations,
        "violations": violations,
        "faults": outcome.faults,
        "wall_s": took,
        "virtual_s": outcome.virtual_s,
        "twice": twice,
        "figures": outcome.figures,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="make sim")
    parser.add_argument("--seeds", default="1-2000", help="a range a-b, or a count n (seeds 1..n)")
    parser.add_argument("--seed", type=int, help="replay one seed with its trace")
    parser.add_argument("--jobs", type=positive, default=os.cpu_count() or 1)
    parser.add_argument("--check-every", type=int, default=50, help="every n-th seed is run twice: same digest")
    parser.add_argument("--out", type=Path, help="write the report here (JSON)")
    args = parser.parse_args()
    fixed_hash_seed()
    if args.seed is not None:
        return replay(args.seed)
    seeds = seed_range(args.seeds)
    if not seeds:
        parser.error(f"--seeds {args.seeds}: give a count n (seeds 1..n) or a range a-b with 1 <= a <= b")
    return campaign(seeds, args.jobs, args.check_every, args.out)


def seed_range(text: str) -> list[int]:
    """`n`: seeds 1..n; `a-b`: seeds a..b; nothing for anything else."""
    first, _, last = text.partition("-")
    if not (first.isdigit() and (not last or last.isdigit())):
        return []
    return list(range(int(first), int(last) + 1)) if last else list(range(1, int(first) + 1))


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


def campaign(seeds: list[int], jobs: int, check_every: int, out: Path | None) -> int:
    started = time.perf_counter()
    chunks = [seeds[n : n + 50] for n in range(0, len(seeds), 50)]
    rows: list[dict[str, Any]] = []
    with ProcessPoolExecutor(jobs) as pool:
        for n, part in enumerate(pool.map(run_seeds, chunks, [check_every] * len(chunks)), start=1):
            rows += part
            if n % PROGRESS_EVERY == 0:  # a long campaign says how far it is, on stderr
                broken = sum(1 for r in rows if r["violations"])
                took = time.perf_counter() - started
                print(f"{len(rows)} schedules in {took:.0f} s, {broken} with a violation", file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    failed = [r for r in rows if r["violations"]]
    steps = sum(r["steps"] for r in rows)
    faults: Counter[str] = Counter()
    figures: Counter[str] = Counter()
    for r in rows:
        faults.update(r["faults"])
        figures.update(r["figures"])
    report = {
        "seeds": f"{seeds[0]}-{seeds[-1]}",
        "schedules": len(rows),
        "wall_s": round(wall, 1),
        "jobs": jobs,
        "schedules_per_s": round(len(rows) / wall, 1),
        "steps": steps,
        "steps_per_schedule": round(steps / len(rows), 1),
        "figures": dict(sorted(figures.items())),
        "faults": dict(sorted(faults.items())),
        "slowest_s": round(max(r["wall_s"] for r in rows), 2),
        "replays_checked": sum(1 for r in rows if r["twice"]),
        "violations": len(failed),
        "failed": [{"seed": r["seed"], "violations": r["violations"][:5]} for r in failed],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "failed"}, indent=1))
    for r in failed[:20]:
        print(f"seed {r['seed']}: {r['violations'][0]}\n  replay: make sim SEED={r['seed']}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if failed else 0


SHORT_TRACE = 60  # steps shown for a failure: the last ones that touched what the violation names


def replay(seed: int) -> int:
    from .fleet import Simulation, quiet

    with quiet():
        outcome = Simulation(seed, keep_trace=FULL_TRACE).run()
    print(f"seed {seed}: {outcome.shape}")
    print(
        f"{outcome.steps} steps, {outcome.virtual_s:.0f} s of virtual time, {outcome.operations} operations, "
        f"digest {outcome.digest[:16]}; faults {outcome.faults}"
    )
    if not outcome.violations:
        print("0 violations")
        return 0
    print(f"the steps that led there (of {outcome.steps}; those naming what the first violation names, and faults):")
    for line in shortened(outcome.trace, outcome.violations[0]):
        print("  " + line)
    for violation in outcome.violations:
        print(f"VIOLATION {violation}")
    return 1


def shortened(trace: list[str], violation: str) -> list[str]:
    """The steps about the operations, sites and principals a violation names (each with the fault drawn at it),
    the last SHORT_TRACE of them; the last steps of all when it names none."""
    names = set(re.findall(r"op_[0-9a-f]{32}|site-\d+|principal-\d+", violation))
    kept = [
        line
        for n, line in enumerate(trace)
        if any(name in line for name in names)
        or (line.startswith("  fault") and n and any(name in trace[n - 1] for name in names))
    ]
    return (kept or trace)[-SHORT_TRACE:]


if __name__ == "__main__":
    sys.exit(main())
