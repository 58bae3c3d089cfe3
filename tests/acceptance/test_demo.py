"""`sitedispatch demo`, as `make demo` runs it (smaller): every action goes through the local HTTP API process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sitedispatch.local.template import CHECKOUT_ENV

DEMO = [sys.executable, "-m", "sitedispatch", "demo"]


def test_the_demo_acts_through_the_api_and_every_phase_succeeds(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith(("SITEDISPATCH_", "AWS_"))}
    clean_env[CHECKOUT_ENV] = str(Path(__file__).resolve().parents[2])  # run elsewhere, it names its checkout
    run = subprocess.run(
        [*DEMO, "--sites", "5", "--latency", "0.5", "--no-wordpress", "--workdir", str(workdir), "--json"],
        capture_output=True,
        text=True,
        env=clean_env,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout)
    assert summary["all_succeeded"] and len(summary["runs"]) == 5
    assert all(i["published"] for i in summary["imports"]) and summary["dead_letter"]["recovered"]
    # the producer was told of each provision's end by its event feed
    assert summary["events"]["told"] == 5 and summary["events"]["missing"] == []
    assert summary["events"]["by_type"]["publication.live"] >= 5
    # and by a signed POST to its receiver (checked by the standardwebhooks package) for each one
    assert summary["webhooks"]["told"] == 5 and summary["webhooks"]["all_verified"]
    assert summary["webhooks"]["missing"] == []
    # what reached the core came through the API: its access log holds the demo's submits, uploads and redrive
    requests = [
        json.loads(line)["line"] for line in (workdir / "api.log").read_text().splitlines() if '"request"' in line
    ]
    submits = [r for r in requests if "POST /operations " in r]
    assert len(submits) >= 5 + 3 + 1 and any("POST /uploads " in r for r in requests)
    assert any("POST /dead-letters/redrive " in r for r in requests) and any("POST /sites/" in r for r in requests)
    assert any("POST /webhooks " in r for r in requests)
    # the operator console ran beside it, its URL (with its token) printed first
    assert re.search(r"operator console\S*: http://127\.0\.0\.1:\d+/\?token=[\w-]{40,}", run.stderr), run.stderr[:2000]
    # ended (no terminal: nothing held) with what to do next, the URL before any worker started
    assert "the fleet stopped with the demo. Next: `.venv/bin/sitedispatch local up`" in run.stderr
    assert run.stderr.index("operator console") < run.stderr.index("submitting 5 provisions")
