"""Cold start: import (the init phase: with Lambda's variables set, a function builds its clients there) plus a first
invocation of each Lambda entrypoint in a fresh interpreter, against `import boto3` alone (the floor every Python
function on Lambda pays) and against boto3 with the three clients (the floor of any function using DynamoDB, SQS and
S3). Median of several fresh processes, each function's runs interleaved with the baselines' (this machine's timings
drift by tens of percent between minutes); no AWS call is made (a malformed batch, an unknown schedule, an unsigned
request), so this is the code's own start-up cost.

The environment is a deployed function's: Lambda's variables (X-Ray's SDK takes another path outside Lambda: it
builds two X-Ray clients at import), active tracing with a sampled trace (segments go to a local UDP port nobody
reads) and the Powertools settings the stack gives every function."""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sitedispatch.domain.resources import FUNCTIONS, LAMBDA_FUNCTION_NAME_ENV
from sitedispatch.local.gateway import http_api_event

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
BASELINE = "import boto3"
# The floor of any Python function that talks to DynamoDB, SQS and S3: boto3 and its three clients, which every
# function here builds in its init phase (functions/runtime.py) as AWS advises.
BASELINE_CLIENTS = """
import boto3
session = boto3.session.Session(region_name="us-east-1")
clients = [session.client(name) for name in ("dynamodb", "sqs", "s3")]
"""
# One record whose body names no durable state: the handler drops it without calling AWS.
MALFORMED_BATCH = {
    "Records": [
        {
            "messageId": "m-1",
            "receiptHandle": "r-1",
            "body": "not json",
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q.fifo",
            "awsRegion": "us-east-1",
            "messageAttributes": {},
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "0",
                "SequenceNumber": "1",
                "MessageGroupId": "g",
                "SenderId": "s",
                "MessageDeduplicationId": "d",
                "ApproximateFirstReceiveTimestamp": "0",
            },
        }
    ]
}
PROBE = """
import json, os, time
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
started = time.perf_counter()
{body}
print(json.dumps({{"seconds": time.perf_counter() - started}}))
"""
FIRST_INVOCATION = """
import {module} as m
class Context:  # the attributes Powertools reads from Lambda's context
    function_name = "ColdStart"; memory_limit_in_mb = 1024; aws_request_id = "r-1"; function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ColdStart"
    log_group_name = "/aws/lambda/ColdStart"; log_stream_name = "s"
    def get_remaining_time_in_millis(self): return 60000
m.{name}(json.loads({event}), Context())
"""


def _once(body: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body)], capture_output=True, text=True, cwd=ROOT, env=env, check=True
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def _paired(body: str, env: dict[str, str]) -> tuple[float, float, float]:
    """(median of the body, of `import boto3`, of boto3 with its three clients), run alternately."""
    mine, floor, clients = [], [], []
    for _ in range(RUNS):
        floor.append(_once(BASELINE, env))
        clients.append(_once(BASELINE_CLIENTS, env))
        mine.append(_once(body, env))
    return statistics.median(mine), statistics.median(floor), statistics.median(clients)


def free_udp_address() -> str:
    """A local port nobody reads: where the X-Ray SDK sends the probes' segments."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def lambda_environment(xray_daemon: str) -> dict[str, str]:
    """What Lambda sets in a deployed function's environment that changes what its code does at import."""
    from sitedispatch.observability import POWERTOOLS_ENVIRONMENT

    return {
        **POWERTOOLS_ENVIRONMENT,
        "LAMBDA_TASK_ROOT": str(ROOT),
        LAMBDA_FUNCTION_NAME_ENV: "ColdStart",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_XRAY_DAEMON_ADDRESS": xray_daemon,
        "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
    }


def placeholder_settings() -> dict[str, str]:
    """Every required setting, as a deployed function's environment would carry it (nothing is called)."""
    from sitedispatch.domain.settings import Settings

    return {
        Settings.env_name(name): f"https://sqs.us-east-1.amazonaws.com/123456789012/{name}.fifo"
        if name.endswith("_url")
        else f"sitedispatch-{name}"
        for name, field in Settings.model_fields.items()
        if field.is_required()
    }


def compile_sources() -> None:
    """The asset ships bytecode (stacks/bundling.py); a checkout run with PYTHONDONTWRITEBYTECODE would compile the
    project's modules from source in every probe instead."""
    import compileall

    compileall.compile_dir(str(ROOT / "sitedispatch"), quiet=1)  # the entrypoints are sitedispatch/functions


def measure(env: dict[str, str]) -> dict[str, Any]:
    compile_sources()
    env = {**env, **placeholder_settings(), **lambda_environment(free_udp_address())}
    env.pop("POWERTOOLS_TRACE_DISABLED", None)
    rows: dict[str, Any] = {}
    baselines = []
    for role, spec in FUNCTIONS.items():
        module, _, name = spec.handler.rpartition(".")
        if role == "api":  # an HTTP API request the function refuses before any AWS request (no signed caller)
            event = json.dumps(http_api_event("GET", "/status", {}, b"", None))
        elif spec.batch_size == 0:
            event = '{"schedule": "none"}'
        else:
            event = json.dumps(MALFORMED_BATCH)
        seconds, baseline, with_clients = _paired(
            FIRST_INVOCATION.format(module=module, name=name, event=repr(event)), env
        )
        baselines.append(baseline)
        rows[role] = {
            "import_and_first_invocation_s": round(seconds, 3),
            "import_boto3_s": round(baseline, 3),
            "ratio_to_boto3": round(seconds / baseline, 2),
            "boto3_and_three_clients_s": round(with_clients, 3),
            "ratio_to_boto3_and_clients": round(seconds / with_clients, 2),
        }
        print(
            f"cold start {role}: {seconds:.3f} s = {seconds / baseline:.2f} x import boto3 ({baseline:.3f} s), "
            f"{seconds / with_clients:.2f} x boto3 and its three clients ({with_clients:.3f} s)",
            flush=True,
        )
    return {"import_boto3_s": round(statistics.median(baselines), 3), **rows}
