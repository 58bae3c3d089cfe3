"""`sitedispatch local cloud`: a moto server holding the stack's resources, created from the shared definitions."""

from __future__ import annotations

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

from sitedispatch.aws.tables import TableSpec, table_specs
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.resources import (
    DEFAULT_FUNCTION_TIMEOUT_S,
    EVENT_BUS_FIELD,
    QUEUES,
    REDRIVE_BACKSTOP_RECEIVES,
    RETENTION_S,
    TABLE_FIELDS,
    visibility_timeout_s,
)
from sitedispatch.domain.settings import Settings
from sitedispatch.local.localstack import S3_ENDPOINT_ENV, SQS_ENDPOINT_ENV
from sitedispatch.local.moto_patches import quiet_moto
from sitedispatch.local.strict import (
    STRICT,
    STRICT_COUNTS_EVERY_S,
    STRICT_SEED_ENV,
    strict_counts_path,
)

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


def create_resources(
    endpoint: str,
    *,
    prefix: str = LOCAL_PREFIX,
    region: str = LOCAL_REGION,
    function_timeout_s: int = DEFAULT_FUNCTION_TIMEOUT_S,
    sqs_s3_endpoint: str | None = None,
    **policy: Any,
) -> Settings:
    """Create the queues, tables and bucket in the emulator (the queues and bucket at `sqs_s3_endpoint` if given);
    return the Settings that point at them."""
    import boto3

    session = boto3.session.Session(region_name=region, aws_access_key_id="testing", aws_secret_access_key="testing")
    sqs = session.client("sqs", endpoint_url=sqs_s3_endpoint or endpoint)
    fields: dict[str, Any] = {"region": region, "lease_seconds": float(function_timeout_s), **policy}
    fields["webhooks_allow_loopback"] = True  # a receiver on 127.0.0.1 is told as a public one would be
    fields.setdefault("readers", LOCAL_READER)
    for spec in QUEUES.values():
        dlq_url = sqs.create_queue(
            QueueName=spec.local_dlq_name(prefix),
            Attributes={"FifoQueue": "true", "MessageRetentionPeriod": str(RETENTION_S)},
        )["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        url = sqs.create_queue(
            QueueName=spec.local_name(prefix),
            Attributes={
                "FifoQueue": "true",
                "DeduplicationScope": "messageGroup",
                "FifoThroughputLimit": "perMessageGroupId",
                "VisibilityTimeout": str(visibility_timeout_s(function_timeout_s)),
                "MessageRetentionPeriod": str(RETENTION_S),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": REDRIVE_BACKSTOP_RECEIVES}
                ),
            },
        )["QueueUrl"]
        fields[spec.url_field] = url
        fields[spec.dlq_url_field] = dlq_url
    for role, field in TABLE_FIELDS.items():
        fields[field] = f"{prefix}-{role}"
    dynamodb = session.client("dynamodb", endpoint_url=endpoint)
    for role, table in table_specs().items():
        dynamodb.create_table(
            TableName=fields[TABLE_FIELDS[role]], BillingMode="PAY_PER_REQUEST", **table_definition(table)
        )
        if table.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=fields[TABLE_FIELDS[role]],
                TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
            )
    fields[EVENT_BUS_FIELD] = f"{prefix}-events"
    session.client("events", endpoint_url=endpoint).create_event_bus(Name=fields[EVENT_BUS_FIELD])
    fields["bucket"] = f"{prefix}-local"
    s3 = session.client("s3", endpoint_url=sqs_s3_endpoint or endpoint)
    s3.create_bucket(Bucket=fields["bucket"])
    return Settings(**fields)


def table_definition(spec: TableSpec) -> dict[str, Any]:
    """CreateTable's key schema, attribute definitions and indexes for one table spec."""
    attributes: dict[str, str] = {}

    def key_schema(partition: Any, sort: Any) -> list[dict[str, str]]:
        keys = [(partition, "HASH")] + ([(sort, "RANGE")] if sort else [])
        for key, _ in keys:
            attributes[key.name] = key.type
        return [{"AttributeName": key.name, "KeyType": kind} for key, kind in keys]

    definition: dict[str, Any] = {"KeySchema": key_schema(spec.partition, spec.sort)}
    if spec.indexes:
        definition["GlobalSecondaryIndexes"] = [
            {
                "IndexName": index.name,
                "KeySchema": key_schema(index.partition, index.sort),
                "Projection": {"ProjectionType": index.projection},
            }
            for index in spec.indexes
        ]
    definition["AttributeDefinitions"] = [{"AttributeName": k, "AttributeType": t} for k, t in attributes.items()]
    return definition


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
    settings = create_resources(
        endpoint, function_timeout_s=function_timeout_s, sqs_s3_endpoint=sqs_s3_endpoint, **policy
    )
    env = local_environment(settings, endpoint, function_timeout_s, sqs_s3_endpoint)
    if strict_seed is not None:
        env[STRICT_SEED_ENV] = str(strict_seed)  # the event source mappings it serves duplicate deliveries too
    if env_file:
        write_env_file(env_file, env)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(json.dumps({"ready": True, "endpoint": endpoint, "env": env, "strict": STRICT.enabled}), flush=True)
    counts = strict_counts_path(env_file) if STRICT.enabled and env_file else None
    while not stop.wait(STRICT_COUNTS_EVERY_S if counts else None):
        if counts:  # what the strict emulation did so far, for a campaign or a test to read (not a port: a file)
            counts.write_text(json.dumps(STRICT.counts()))
    if counts:
        counts.write_text(json.dumps(STRICT.counts()))
    server.stop()
    sys.stdout.flush()
