"""Start, watch and stop the local runtime's processes (cloud, API, workers, scheduler) for `local up`, the demo and
tests.

Each child is its own process group (so a test can SIGKILL or SIGSTOP a worker with all its environments), logs to a
file under the work directory, and announces readiness with one JSON line containing "ready".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sitedispatch.domain.errors import SiteDispatchError
from sitedispatch.local.strict import STRICT_SEED_ENV

READY_TIMEOUT_S = 60.0


class LocalRuntimeError(SiteDispatchError, RuntimeError):
    """A process of the local runtime did not come up."""

    code = "local_runtime_failed"


def free_port() -> int:
    """A port of 127.0.0.1 free at this moment, for a server a test or the runtime starts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process_groups(processes: list[subprocess.Popen[bytes]], timeout_s: float = 10.0) -> None:
    """SIGTERM each process's group (each started in a session of its own), wait for all, SIGKILL the groups of any
    still running at the deadline; last, SIGKILL every group, so nothing they started outlives them."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _last_line(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "it printed nothing"
    starts = [n for n, line in enumerate(lines) if line.startswith(("error", "Traceback"))]
    return " ".join(lines[starts[-1] :] if starts else lines[-1:])[-300:]  # an error message wrapped over lines


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def alive(self) -> bool:
        return self.process.poll() is None


LOCK_FILE_NAME = "runtime.lock"  # held (flock) by the one runtime a work folder has at a time; it names its pid


class LocalRuntime:
    """A set of local processes sharing one emulated cloud. Use as a context manager: every child is stopped. A work
    folder holds one at a time: a second one there is refused in one line, naming the first's process."""

    def __init__(self, workdir: Path, python: str = sys.executable) -> None:
        self.workdir = workdir
        self.python = python
        self.children: list[Child] = []
        self.env: dict[str, str] = {}
        self._lock: Any = None
        workdir.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> LocalRuntime:
        lock = (self.workdir / LOCK_FILE_NAME).open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            lock.close()
            raise LocalRuntimeError(
                f"a local runtime already runs from {self.workdir} (process {holder}): use it (the CLI finds it "
                "here), stop it with Ctrl-C where it runs, or start another with --workdir"
            ) from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        self._lock = lock
        return self

    def __exit__(self, *_: Any) -> None:
        try:
            self.stop_all()
        finally:
            if self._lock is not None:
                self._lock.close()  # releases the flock
                self._lock = None

    @property
    def env_file(self) -> Path:
        return self.workdir / "local.env"

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Child:
        log = self.workdir / f"{name}.log"
        handle = log.open("ab")
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            [self.python, "-m", "sitedispatch", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            start_new_session=True,
        )
        handle.close()
        child = Child(name, process, log)
        self.children.append(child)
        return child

    def _await_ready(self, child: Child, offset: int, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with child.log.open("rb") as fh:
                fh.seek(offset)
                for line in fh:
                    if b'"ready"' in line:
                        try:
                            child.ready = json.loads(line)
                            return child.ready
                        except ValueError:
                            continue
            if not child.alive():
                raise LocalRuntimeError(
                    f"{child.name} exited with {child.process.returncode}: {_last_line(child.log)} (log: {child.log})"
                )
            time.sleep(0.05)
        raise LocalRuntimeError(
            f"{child.name} not ready after {timeout_s}s: {_last_line(child.log)} (log: {child.log})"
        )

    def _log_offset(self, name: str) -> int:
        log = self.workdir / f"{name}.log"
        return log.stat().st_size if log.exists() else 0

    def start_cloud(
        self,
        port: int = 0,
        function_timeout_s: int | None = None,
        policy: dict[str, Any] | None = None,
        strict_seed: int | None = None,
        sqs_s3_endpoint: str | None = None,
        template: Path | None = None,
    ) -> dict[str, str]:
        """`sqs_s3_endpoint`: the queues and the bucket on that emulator (LocalStack), the tables on moto.
        `template`: deploy that file instead of the template synthesized from the checkout."""
        args = ["local", "cloud", "--port", str(port), "--env-file", str(self.env_file)]
        if template:
            args += ["--template", str(template)]
        if sqs_s3_endpoint:
            args += ["--sqs-s3-endpoint", sqs_s3_endpoint]
        if strict_seed is None and os.environ.get(
            STRICT_SEED_ENV
        ):  # a test's strict run (tests/conftest.py `emulation`)
            strict_seed = int(os.environ[STRICT_SEED_ENV])
        if strict_seed is not None:
            args += ["--strict", "--seed", str(strict_seed)]
        if function_timeout_s:
            args += ["--function-timeout", str(function_timeout_s)]
        for key, value in (policy or {}).items():
            args += ["--set", f"{key}={value}"]
        offset = self._log_offset("cloud")
        child = self._spawn("cloud", args)
        ready = self._await_ready(child, offset)
        self.env = dict(ready["env"])
        return self.env

    def start_worker(
        self,
        queue: str = "operations",
        concurrency: int = 1,
        name: str | None = None,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Child:
        [child] = self.start_workers([(queue, concurrency, name, extra, env)])
        return child

    def start_workers(
        self, specs: Sequence[tuple[str, int, str | None, list[str] | None, dict[str, str] | None]]
    ) -> list[Child]:
        """Start several workers at once and wait until all are ready (they warm up in parallel)."""
        started = []
        for queue, concurrency, name, extra, env in specs:
            name = name or f"worker-{queue}-{sum(c.name.startswith(f'worker-{queue}') for c in self.children)}"
            offset = self._log_offset(name)
            child = self._spawn(
                name,
                ["local", "worker", "--queue", queue, "--concurrency", str(concurrency), *(extra or [])],
                {**self.env, **(env or {})},
            )
            started.append((child, offset))
        for child, offset in started:
            self._await_ready(child, offset)
        return [child for child, _ in started]

    def start_api(self, port: int = 0) -> str:
        """The HTTP API on 127.0.0.1 (its URL is added to the env file, where the CLI finds it)."""
        from sitedispatch.domain.resources import API_URL_VARIABLE

        offset = self._log_offset("api")
        child = self._spawn("api", ["local", "api", "--port", str(port), "--env-file", str(self.env_file)], self.env)
        url = str(self._await_ready(child, offset)["url"])
        self.env[API_URL_VARIABLE] = url
        return url

    def start_scheduler(self, rate_scale: float = 1.0) -> Child:
        offset = self._log_offset("scheduler")
        child = self._spawn("scheduler", ["local", "scheduler", "--rate-scale", str(rate_scale)], self.env)
        self._await_ready(child, offset)
        return child

    def stop(self, child: Child, timeout_s: float = 10.0) -> None:
        self.stop_many([child], timeout_s)

    def stop_many(self, children: list[Child], timeout_s: float = 10.0) -> None:
        """Ask every child to stop at once (SIGTERM after SIGCONT: a stopped process cannot act on it), then wait;
        whatever has not exited by the deadline is killed."""
        for child in children:
            if child.alive():
                child.signal_group(signal.SIGCONT)
                child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for child in children:
            if child.alive():
                try:
                    child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.signal_group(signal.SIGKILL)
                    child.process.wait(timeout=timeout_s)
            child.signal_group(signal.SIGKILL)  # reap environments orphaned by a killed host
            if child in self.children:
                self.children.remove(child)

    def kill(self, child: Child) -> None:
        """SIGKILL the whole process group: a host failure."""
        child.signal_group(signal.SIGKILL)
        child.process.wait(timeout=10)

    def stop_all(self) -> None:
        # Workers and scheduler first, the cloud they talk to last.
        self.stop_many([c for c in self.children if c.name != "cloud"])
        self.stop_many(list(self.children))
        self.keep_judged_calls()

    def keep_judged_calls(self) -> None:
        """With SITEDISPATCH_IAM_CALLS_DIR set (make test), leave this runtime's deployment and the calls IAM judged
        there, for the IAM report (local/iam_report.py)."""
        from sitedispatch.local.deployment import DEPLOYMENT_FILE_NAME
        from sitedispatch.local.iam import IAM_CALLS_DIR_ENV, IAM_CALLS_FILE_NAME

        into = os.environ.get(IAM_CALLS_DIR_ENV)
        deployment = self.workdir / DEPLOYMENT_FILE_NAME
        if not into or not deployment.is_file():
            return
        kept = Path(into) / f"{os.getpid()}-{time.time_ns()}"
        kept.mkdir(parents=True, exist_ok=True)
        for name in (DEPLOYMENT_FILE_NAME, IAM_CALLS_FILE_NAME):
            if (self.workdir / name).is_file():
                (kept / name).write_bytes((self.workdir / name).read_bytes())
        deployment.unlink()  # kept once, however often this runtime is stopped
