"""The short profile of the deterministic simulation inside `make test`: 2,000 seeded schedules of the whole
dispatcher under faults, every invariant holding, every 50th seed run twice to the same digest (`make sim` runs
100,000; sim/README.md). In its own processes: nothing here needs an emulator, nor this process's coverage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.faults import CALL_FAULTS, QUEUE_FAULTS

ROOT = Path(__file__).resolve().parents[2]
PROFILE_SEEDS = 2000


@pytest.mark.timeout(1200)  # ~90 s on two idle cores; minutes on a busy machine
def test_two_thousand_seeded_schedules_hold_every_invariant(tmp_path: Path) -> None:
    report_path = tmp_path / "profile.json"
    run = subprocess.run(
        [sys.executable, "-m", "sim.run", "--seeds", f"1-{PROFILE_SEEDS}", "--jobs", "2", "--out", str(report_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]  # each failure: its seed and `make sim SEED=`
    report = json.loads(report_path.read_text())
    assert report["schedules"] == PROFILE_SEEDS and report["violations"] == 0
    assert report["replays_checked"] == PROFILE_SEEDS // 50
    assert set(report["faults"]) == set(CALL_FAULTS + QUEUE_FAULTS)  # every kind of fault was drawn somewhere
    figures = report["figures"]
    reached: tuple[str, ...] = ("commits", "dead", "cancelled", "superseded", "redriven", "imports_resumed")
    reached += ("webhooks_accepted",)
    reached += ("dependency_starts", "dependency_breaker_opened", "dependency_probes")  # sim/dependencies.py
    for outcome in reached:
        assert figures[outcome] > 0, outcome  # the schedules reach every outcome, not only the happy path
