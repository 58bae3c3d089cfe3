"""G1 on the local runtime with real processes: ten unrelated sites run at the same time, not one after another."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Operation, Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime
from tests.acceptance.conftest import wait_for
from tests.factories import PROVISION, present

ROOT = Path(__file__).resolve().parents[2]
LATENCY_S = 2.0  # simulated provisioning work per site
SITES = [f"fleet-site-{i:02d}" for i in range(10)]


def one_commit_listed(deps: Dependencies, site: str) -> bool:
    return len(deps.commits.history(site)) == 1


@pytest.mark.guarantee
def test_ten_unrelated_sites_start_together_and_finish_in_about_one_operation_time(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the local runtime: the emulated cloud and 4 worker processes of 3 environments each
    env = runtime.start_cloud(0, policy={"reference_latency_s": LATENCY_S})
    workers = [runtime.start_worker("operations", 3) for _ in range(4)]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()
    submitter = deps.submitter()

    # When ten provisions for ten unrelated sites are submitted together
    with ThreadPoolExecutor(len(SITES)) as pool:
        ops = list(
            pool.map(
                lambda site: (
                    submitter.submit(
                        kind="provision", site_id=site, principal="fleet", params=PROVISION
                    ).operation.operation_id
                ),
                SITES,
            )
        )

    def all_terminal() -> list[Operation] | None:
        got = [deps.operations.get(op) for op in ops]
        done = [o for o in got if o is not None and o.status.terminal]
        return done if len(done) == len(ops) else None

    final = wait_for(all_terminal, timeout_s=60, what="all ten operations terminal")

    # Then all succeed, all start within 1 s of each other, and all run at the same time
    assert [op.status for op in final] == [Status.SUCCEEDED] * len(SITES)
    starts = [present(op.started_at) for op in final]
    ends = [present(op.finished_at) for op in final]
    durations = [e - s for s, e in zip(starts, ends, strict=True)]
    spread = max(starts) - min(starts)
    queued = [present(op.queued_at) for op in final]
    print(
        f"\nG1: start spread {spread:.3f}s (of which submitting: queued spread {max(queued) - min(queued):.3f}s), "
        f"durations median {statistics.median(durations):.2f}s, "
        f"fleet {max(ends) - min(starts):.2f}s"
    )
    assert spread < 1.0
    assert max(starts) < min(ends), "some site only started after another had finished"
    assert max(ends) - min(starts) < 2 * statistics.median(durations)  # about the time of one, not ten
    for site in SITES:
        record = deps.sites.get(site)
        assert record is not None and record.head_version == 1 and record.fence == 1
        # the history is read through the by-site index, eventually consistent (as on AWS: the strict cloud lags it)
        wait_for(partial(one_commit_listed, deps, site), timeout_s=5, what=f"{site}'s one commit listed")
    assert all(w.alive() for w in workers)


WAYS_IN = {
    "ten requests, one principal": ("requests", False),
    "ten requests, ten principals": ("requests", True),
    "one batch, one principal": ("batch", False),
    "one batch, ten tenants of one principal": ("batch", True),
}


def submitted_through_the_api(url: str, how: str, many: bool, sites: list[str]) -> list[str]:
    """Ten provisions for ten new sites as a producer sends them, from a process of its own (tests/acceptance/
    producer.py), untraced by this process's coverage: ten requests at once, or one batch request."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("COV_CORE_", "COVERAGE_"))}
    args = [sys.executable, "-m", "tests.acceptance.producer", url, how, "many" if many else "one", *sites]
    done = subprocess.run(args, capture_output=True, text=True, env=clean, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout))


@pytest.mark.guarantee
def test_ten_sites_submitted_through_the_api_in_every_way_are_admitted_together_and_start_together(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch, emulation: str
) -> None:
    """G1 as a producer reaches it: over HTTP to the local API (its function in warm environments, as Lambda's
    scale), as ten concurrent requests or one batch, from one principal or many, on moto and on the strict cloud."""
    env = runtime.start_cloud(0, policy={"reference_latency_s": LATENCY_S})
    url = runtime.start_api()
    workers = [runtime.start_worker("operations", 3) for _ in range(4)]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()
    # Ready, as a producer finds a running deployment: one operation has gone through the API and a worker
    ready = submitted_through_the_api(url, "requests", False, ["ready-site"])
    wait_for(lambda: (op := deps.operations.get(ready[0])) is not None and op.status.terminal, 60, what="the first")
    figures = []
    for round_, (name, (how, many)) in enumerate(WAYS_IN.items()):
        sites = [f"way-{round_}-site-{i:02d}" for i in range(10)]
        ops = submitted_through_the_api(url, how, many, sites)

        def all_terminal(ops: list[str] = ops) -> list[Operation] | None:
            got = [deps.operations.get(op) for op in ops]
            done = [o for o in got if o is not None and o.status.terminal]
            return done if len(done) == len(ops) else None

        final = wait_for(all_terminal, timeout_s=60, what=f"{name}: all ten terminal")
        assert [op.status for op in final] == [Status.SUCCEEDED] * len(sites), name
        # sent: marked queued, or found running by then (a fast worker starts it before the submit marks it)
        queued = [op.queued_at or present(op.started_at) for op in final]
        starts = [present(op.started_at) for op in final]
        ends = [present(op.finished_at) for op in final]
        admitted, started = max(queued) - min(queued), max(starts) - min(starts)
        figures.append(f"{name}: admitted over {admitted:.3f}s, started over {started:.3f}s")
        assert admitted < 0.5, figures[-1]
        assert started < 1.0, figures[-1]
        assert max(starts) < min(ends), f"{name}: a site only started after another had finished"
    print("\nG1 through the API:\n  " + "\n  ".join(figures))
    assert all(w.alive() for w in workers)


def test_the_cli_drives_the_running_local_runtime(runtime: LocalRuntime) -> None:
    """The CLI, a process of its own, finds the runtime's API through the env file and drives it over HTTP (the
    local API in its own process, its function in environments of their own)."""
    runtime.start_cloud(0)
    runtime.start_api()
    runtime.start_worker("operations", 2)
    cli = [sys.executable, "-m", "sitedispatch", "--env-file", str(runtime.env_file)]
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith(("SITEDISPATCH_", "AWS_"))}

    submitted = subprocess.run(
        [
            *cli,
            "submit",
            "provision",
            "--site",
            "cli-site",
            "--param",
            "title=CLI",
            "--param",
            "admin_email=cli@example.org",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=clean_env,
        timeout=60,
        check=True,
    )
    op_id = json.loads(submitted.stdout)["operation_id"]
    waited = subprocess.run(
        [*cli, "ops", "wait", op_id, "--timeout", "30", "--json"],
        capture_output=True,
        text=True,
        env=clean_env,
        timeout=60,
    )
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["status"] == "succeeded"
    status = subprocess.run([*cli, "status", "--json"], capture_output=True, text=True, env=clean_env, timeout=60)
    assert status.returncode == 0 and json.loads(status.stdout)["backlog_by_status"]["queued"] == 0


def test_a_worker_and_the_scheduler_started_in_another_shell_find_the_running_runtime(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    """Started by hand in another shell (no environment), they read .sitedispatch/local.env as the CLI does."""
    runtime.start_cloud(0)
    shell = tmp_path / "shell"
    (shell / ".sitedispatch").mkdir(parents=True)
    (shell / ".sitedispatch" / "local.env").write_text(runtime.env_file.read_text())
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith(("SITEDISPATCH_", "AWS_"))}

    def scheduler_once(cwd: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "sitedispatch", "local", "scheduler", "--once"]
        return subprocess.run(command, capture_output=True, text=True, env=clean_env, cwd=cwd, timeout=120)

    scheduler = scheduler_once(shell)
    assert scheduler.returncode == 0, scheduler.stdout[-1000:] + scheduler.stderr[-1000:]
    elsewhere = scheduler_once(tmp_path)
    assert elsewhere.returncode != 0 and "sitedispatch local up" in elsewhere.stderr + elsewhere.stdout
    assert "Traceback" not in elsewhere.stderr
