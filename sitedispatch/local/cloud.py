"""`sitedispatch local cloud`: a moto server holding the stack, deployed from its synthesized template, with IAM
enforced on every call a function makes (local/template.py, local/deployment.py, local/iam.py)."""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.resources import BUCKET_FIELD, DEFAULT_FUNCTION_TIMEOUT_S, QUEUES
from sitedispatch.domain.settings import Settings
from sitedispatch.local.deployment import DEPLOYMENT_ENV, DEPLOYMENT_FILE_NAME, Deployment, deploy
from sitedispatch.local.iam import CALLS, IAM_CALLS_FILE_NAME, patch_moto_iam_enforcement
from sitedispatch.local.localstack import S3_ENDPOINT_ENV, SQS_ENDPOINT_ENV
from sitedispatch.local.moto_patches import quiet_moto
from sitedispatch.local.strict import (
    STRICT,
    STRICT_COUNTS_EVERY_S,
    STRICT_SEED_ENV,
    strict_counts_path,
)
from sitedispatch.local.template import local_context, synthesized

LOCAL_PREFIX = "sitedispatch"
LOCAL_REGION = "us-east-1"
# moto accepts any credentials; these make sure nothing ever reaches for real ones (or for instance metadata).
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": LOCAL_REGION,
    "AWS_REGION": LOCAL_REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
# The local cloud's function timeout (queue visibility is 6x it), read by `local worker` as its default timeout.
FUNCTION_TIMEOUT_ENV = "SITEDISPATCH_LOCAL_FUNCTION_TIMEOUT_S"


def untraced(server: Any) -> None:
    """The emulator's request threads run without the process's trace function. Under a test run's coverage
    (which measures sitedispatch, never moto) tracing them nearly doubles the time of an in-process test."""
    serve = server.process_request_thread

    def process_request_thread(request: Any, client_address: Any) -> None:
        sys.settrace(None)  # this thread only; threads the process starts later are traced as before
        serve(request, client_address)

    server.process_request_thread = process_request_thread


@contextmanager
def in_process_cloud() -> Iterator[str]:
    """A moto server in this process on a free 127.0.0.1 port (tests and benchmarks); its endpoint URL."""
    from moto.server import ThreadedMotoServer

    for key, value in FAKE_AWS.items():
        os.environ.setdefault(key, value)
    quiet_moto()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    untraced(server._server)
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def local_environment(
    settings: Settings,
    endpoint: str,
    function_timeout_s: int = DEFAULT_FUNCTION_TIMEOUT_S,
    sqs_s3_endpoint: str | None = None,
) -> dict[str, str]:
    """Everything a local process needs: the settings, the endpoints, fake credentials, Powertools switches.
    `sqs_s3_endpoint`: SQS and S3 are there (LocalStack), DynamoDB at `endpoint` (moto)."""
    second = {SQS_ENDPOINT_ENV: sqs_s3_endpoint, S3_ENDPOINT_ENV: sqs_s3_endpoint} if sqs_s3_endpoint else {}
    return {
        **FAKE_AWS,
        FUNCTION_TIMEOUT_ENV: str(function_timeout_s),
        "AWS_ENDPOINT_URL": endpoint,
        **second,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "sitedispatch",
        "POWERTOOLS_METRICS_NAMESPACE": "SiteDispatch",
        **settings.to_environment(),
    }


LOCAL_READER = "reader"  # the local runtime's read-only identity (`--as reader`), as the stack's `readers` context


def deploy_local(
    endpoint: str,
    *,
    prefix: str = LOCAL_PREFIX,
    region: str = LOCAL_REGION,
    function_timeout_s: int = DEFAULT_FUNCTION_TIMEOUT_S,
    sqs_s3_endpoint: str | None = None,
    template: dict[str, Any] | None = None,
    **policy: Any,
) -> tuple[Settings, Deployment]:
    """Deploy the stack's synthesized template into the emulator as stack `prefix` (the queues and the bucket
    also at `sqs_s3_endpoint` if given, LocalStack); the Settings the functions' environment gives, with `policy`
    over it (what a test tunes: limits, retries), and the deployment the local runtime reads."""

    session = admin_session(region)
    if template is None:
        template = synthesized(
            local_context(function_timeout_s, Settings.model_fields["operators"].default, LOCAL_READER)
        )
    deployment = deploy(session, endpoint, template, prefix)
    deployed = {
        name: deployment.environment()[Settings.env_name(name)]
        for name in Settings.model_fields
        if Settings.env_name(name) in deployment.environment()
    }
    fields: dict[str, Any] = {**deployed, "lease_seconds": float(function_timeout_s), **policy}
    fields["webhooks_allow_loopback"] = True  # a receiver on 127.0.0.1 is told as a public one would be
    if sqs_s3_endpoint:
        fields.update(mirror_queues_and_bucket(session, endpoint, sqs_s3_endpoint, fields))
    return Settings(**fields), deployment


@functools.lru_cache(maxsize=4)
def admin_session(region: str) -> Any:
    """The account administrator's session (the keys moto's IAM enforcement lets through): one per process."""
    import boto3

    return boto3.session.Session(region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing")


def create_resources(endpoint: str, **options: Any) -> Settings:
    """The template deployed (deploy_local); the Settings that point at it."""
    return deploy_local(endpoint, **options)[0]


def mirror_queues_and_bucket(session: Any, endpoint: str, second: str, fields: dict[str, Any]) -> dict[str, str]:
    """The deployed queues (with their attributes and redrive policies) and bucket made again at `second`
    (LocalStack), where the functions then find them; the tables stay on moto. Their new URLs by Settings field."""
    here = session.client("sqs", endpoint_url=endpoint)
    there = session.client("sqs", endpoint_url=second)
    moved: dict[str, str] = {}
    arns: dict[str, str] = {}
    for spec in QUEUES.values():
        for field in (spec.dlq_url_field, spec.url_field):  # a dead-letter queue before the queue naming it
            attributes = here.get_queue_attributes(QueueUrl=fields[field], AttributeNames=["All"])["Attributes"]
            kept = {k: v for k, v in attributes.items() if k in MIRRORED_QUEUE_ATTRIBUTES}
            if "RedrivePolicy" in kept:
                policy = json.loads(kept["RedrivePolicy"])
                policy["deadLetterTargetArn"] = arns[policy["deadLetterTargetArn"]]
                kept["RedrivePolicy"] = json.dumps(policy)
            url = there.create_queue(QueueName=fields[field].rsplit("/", 1)[1], Attributes=kept)["QueueUrl"]
            arns[attributes["QueueArn"]] = there.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
            moved[field] = url
    session.client("s3", endpoint_url=second).create_bucket(Bucket=fields[BUCKET_FIELD])
    return moved


# What a queue is created with (the rest are counts and timestamps)
MIRRORED_QUEUE_ATTRIBUTES = (
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "VisibilityTimeout",
    "MessageRetentionPeriod",
    "RedrivePolicy",
    "SqsManagedSseEnabled",
)


def write_env_file(path: Path, env: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
    tmp.replace(path)


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key] = value
    return env


def check_port_free(port: int) -> None:
    """Refuse a port something already listens on (another local cloud, LocalStack's 4566): moto's server would fail
    to bind in its own thread and this process would wait on whatever answers there."""
    if port == 0:
        return
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no obstacle
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise InvalidInput(
                f"port {port} on 127.0.0.1 is in use (another local cloud, or LocalStack?): stop it, or pass "
                "--port 0 for any free port",
                field="port",
            ) from None


def check_answers(endpoint: str) -> None:
    """Refuse a second emulator's endpoint where nothing listens, in one line, before any resource is made."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    try:
        with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=2):
            return
    except (OSError, ValueError):
        raise InvalidInput(
            f"nothing answers at {endpoint} (--sqs-s3-endpoint): start LocalStack there first "
            "(sitedispatch/local/localstack.py has its settings)",
            field="sqs_s3_endpoint",
        ) from None


def serve(
    port: int,
    env_file: Path | None,
    function_timeout_s: int,
    policy: dict[str, Any],
    strict_seed: int | None = None,
    sqs_s3_endpoint: str | None = None,
    template: Path | None = None,
) -> None:
    """Run the emulator until SIGTERM/SIGINT. Prints one JSON line {"ready": ..., "endpoint": ...} when usable.
    `strict_seed`: behave as AWS does where moto is kinder (local/strict.py), seeded. `sqs_s3_endpoint`: the
    queues and the bucket live there (LocalStack, local/localstack.py), the tables here."""
    from moto.server import ThreadedMotoServer

    check_port_free(port)
    if sqs_s3_endpoint:
        check_answers(sqs_s3_endpoint)
    os.environ.update(FAKE_AWS)
    quiet_moto()
    if strict_seed is not None:
        STRICT.enable(strict_seed)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    endpoint = f"http://{host}:{bound}"
    patch_moto_iam_enforcement()
    settings, deployment = deploy_local(
        endpoint,
        function_timeout_s=function_timeout_s,
        sqs_s3_endpoint=sqs_s3_endpoint,
        template=json.loads(template.read_text()) if template else None,
        **policy,
    )
    env = local_environment(settings, endpoint, function_timeout_s, sqs_s3_endpoint)
    calls = None
    if env_file:
        deployment.write(env_file.with_name(DEPLOYMENT_FILE_NAME))
        env[DEPLOYMENT_ENV] = str(env_file.with_name(DEPLOYMENT_FILE_NAME).resolve())
        calls = env_file.with_name(IAM_CALLS_FILE_NAME)
    if strict_seed is not None:
        env[STRICT_SEED_ENV] = str(strict_seed)  # the event source mappings it serves duplicate deliveries too
    if env_file:
        write_env_file(env_file, env)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(json.dumps({"ready": True, "endpoint": endpoint, "env": env, "strict": STRICT.enabled}), flush=True)
    counts = strict_counts_path(env_file) if STRICT.enabled and env_file else None
    report_until(stop, counts, calls)
    server.stop()
    sys.stdout.flush()


def report_until(stop: threading.Event, counts: Path | None, calls: Path | None) -> None:
    """Until `stop`: what the strict emulation did so far, and every call IAM judged, written to files a campaign, a
    test or the IAM report reads while the cloud runs (not a port); once more at the end."""
    while True:
        stopping = stop.wait(STRICT_COUNTS_EVERY_S)
        if counts:
            counts.write_text(json.dumps(STRICT.counts()))
        if calls:
            CALLS.write(calls)
        if stopping:
            return
