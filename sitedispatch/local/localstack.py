"""LocalStack's SQS and S3 beside moto's DynamoDB: a second, independent emulator for the parts where one exists here.

LocalStack is installed by `make localstack` into its own environment (`.venv-localstack`, from
`tools/localstack.lock`: its pins clash with the project's) and started here as one process on a free port of
127.0.0.1, with everything that would reach outside switched off (its DNS server, its analytics, certificate and
infrastructure downloads). Its DynamoDB needs a Java download at run time, which cannot be fetched here, so a local
cloud given `--sqs-s3-endpoint` keeps its tables on moto and creates its queues and bucket on LocalStack; every
process it serves reaches each service through boto3's per-service endpoint variables.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from sitedispatch.domain.errors import InvalidInput
from sitedispatch.local.supervisor import LocalRuntimeError, free_port, stop_process_groups

LOCALSTACK_PYTHON_ENV = "SITEDISPATCH_LOCALSTACK_PYTHON"  # set: the tests also run against LocalStack's SQS and S3
DEFAULT_LOCALSTACK_PYTHON = Path(".venv-localstack/bin/python")
READY_TIMEOUT_S = 120.0  # about 20 s here; the first start after an install compiles its modules
# boto3's per-service endpoints, which take precedence over AWS_ENDPOINT_URL (DynamoDB stays on it: moto)
SQS_ENDPOINT_ENV, S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3"
READY_LINE = b"Ready."


def localstack_python() -> Path | None:
    """The LocalStack environment's interpreter the tests are asked to use, or None (not asked)."""
    named = os.environ.get(LOCALSTACK_PYTHON_ENV)
    return Path(named) if named else None


def localstack_environment(port: int, root: Path) -> dict[str, str]:
    """LocalStack's settings: SQS and S3 only, on 127.0.0.1:PORT, state under `root`, nothing sent anywhere else."""
    return {
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "LOCALSTACK_HOST": f"127.0.0.1:{port}",  # the host its queue URLs and presigned URLs name
        "SQS_ENDPOINT_STRATEGY": "path",  # queue URLs on that host, not on a *.localstack.cloud name
        "SERVICES": "sqs,s3",
        "EAGER_SERVICE_LOADING": "1",  # both services loaded before "Ready.", not on a test's first request
        "DNS_ADDRESS": "0",  # no DNS server (it would look for an upstream resolver outside)
        "DISABLE_EVENTS": "1",  # no analytics
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "SKIP_INFRA_DOWNLOADS": "1",
        "FILESYSTEM_ROOT": str(root),
    }


def _health(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/_localstack/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running_localstack(python: Path, workdir: Path) -> Iterator[str]:
    """LocalStack (SQS and S3) on a free port of 127.0.0.1, stopped on exit; its endpoint URL."""
    if not python.exists():
        raise InvalidInput(f"no LocalStack environment at {python}: run `make localstack` first", field="python")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "localstack.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(
            [str(python), "-m", "localstack.runtime.main"],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**_inherited(), **localstack_environment(port, workdir / "filesystem")},
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _await_ready(process, log, endpoint)
        yield endpoint
    finally:
        stop_process_groups([process], timeout_s=20)


def _inherited() -> dict[str, str]:
    """The caller's environment less anything pointing the emulator at AWS or at another emulator."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SITEDISPATCH_", "LOCALSTACK_"))}


def _await_ready(process: subprocess.Popen[bytes], log: Path, endpoint: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["it printed nothing"]
            raise LocalRuntimeError(f"LocalStack exited with {process.returncode}: {tail[0]} (log: {log})")
        if READY_LINE in log.read_bytes() and _health(endpoint):
            return
        time.sleep(0.2)
    raise LocalRuntimeError(f"LocalStack not ready after {READY_TIMEOUT_S:.0f} s (log: {log})")
