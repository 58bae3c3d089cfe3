"""What a newcomer meets first with the local runtime: a command run where the runtime is not, a runtime already
running, one that stopped. Each ends in one line saying what to do, and a non-zero exit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sitedispatch.cli.context import DEFAULT_LOCAL_ENV, find_local_env
from sitedispatch.local.cloud import write_env_file
from sitedispatch.local.supervisor import LocalRuntime, LocalRuntimeError
from tests.conftest import Cloud


def sitedispatch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a shell runs it: its own process, nothing of the test's environment but PATH and HOME."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SITEDISPATCH_", "AWS_"))}
    return subprocess.run(
        [sys.executable, "-m", "sitedispatch", *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=60
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_second_runtime_in_one_folder_is_refused_in_one_line_naming_the_first(tmp_path: Path) -> None:
    with LocalRuntime(tmp_path / "runtime"):
        first = f"already runs from {tmp_path / 'runtime'} \\(process {os.getpid()}\\)"
        with pytest.raises(LocalRuntimeError, match=first):
            LocalRuntime(tmp_path / "runtime").__enter__()
        second = sitedispatch("local", "up", "--workdir", str(tmp_path / "runtime"), cwd=tmp_path)
        assert second.returncode != 0 and second.stderr.count("\n") == 1, second.stderr
        assert "a local runtime already runs from" in second.stderr and "Traceback" not in second.stderr
        demo = sitedispatch("demo", "--workdir", str(tmp_path / "runtime"), "--no-wordpress", cwd=tmp_path)
        assert demo.returncode != 0 and "already runs from" in demo.stderr and demo.stderr.count("\n") == 1
    with LocalRuntime(tmp_path / "runtime"):  # the first stopped: the folder is free
        pass


def test_a_worker_or_scheduler_where_the_runtime_stopped_says_so_in_one_line_and_exits_non_zero(
    cloud: Cloud, tmp_path: Path
) -> None:
    """The env file a stopped runtime left names an endpoint nothing answers at: no `ready`, no crash loop."""
    gone = f"http://127.0.0.1:{free_port()}"
    write_env_file(tmp_path / DEFAULT_LOCAL_ENV, {**cloud.env, "AWS_ENDPOINT_URL": gone})
    for command in (["local", "worker", "--queue", "operations"], ["local", "scheduler", "--once"]):
        ran = sitedispatch(*command, cwd=tmp_path)
        assert ran.returncode != 0 and ran.stdout == "", (command, ran.stdout)
        assert ran.stderr.count("\n") == 1 and f"nothing answers at {gone}" in ran.stderr, ran.stderr
        assert "sitedispatch local up" in ran.stderr


def test_the_cli_finds_the_runtime_from_a_folder_below_it(tmp_path: Path) -> None:
    env = tmp_path / DEFAULT_LOCAL_ENV
    write_env_file(env, {"SITEDISPATCH_API_URL": "http://127.0.0.1:1"})
    below = tmp_path / "site" / "themes"
    below.mkdir(parents=True)
    assert find_local_env(below) == env.resolve() and find_local_env(tmp_path) == env.resolve()
    ran = sitedispatch("ops", "list", cwd=below)  # found (it names a runtime that is not there): says that
    assert ran.returncode != 0 and "nothing answers at http://127.0.0.1:1" in ran.stderr, ran.stderr
    nowhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    nowhere.mkdir()
    assert find_local_env(nowhere) == DEFAULT_LOCAL_ENV


def test_ctrl_c_while_local_up_starts_stops_it_at_once_and_leaves_nothing_running(tmp_path: Path) -> None:
    import signal
    import time

    from sitedispatch.local.template import CHECKOUT_ENV

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SITEDISPATCH_", "AWS_"))}
    clean[CHECKOUT_ENV] = str(Path(__file__).resolve().parents[2])  # run elsewhere, it names its checkout
    workdir = tmp_path / "runtime"
    up = subprocess.Popen(
        [sys.executable, "-m", "sitedispatch", "local", "up", "--port", "0", "--workdir", str(workdir)],
        cwd=tmp_path,
        env=clean,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (workdir / "local.env").exists() and time.monotonic() < deadline:  # the cloud is up, the rest not
            time.sleep(0.05)
        assert (workdir / "local.env").exists()
        interrupted = time.monotonic()
        up.send_signal(signal.SIGINT)
        out, _ = up.communicate(timeout=30)
        took = time.monotonic() - interrupted
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
    assert up.returncode == 130 and "interrupted while starting: stopped" in out and "Traceback" not in out, out
    assert "local runtime up" not in out and took < 20
    assert not (workdir / "local.env").exists()  # nothing to find: the CLI says no runtime runs
    left = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True).stdout.split()
    assert left == [], left  # every child stopped
    with LocalRuntime(workdir):  # and the folder is free
        pass
