"""Cold start: import plus a first invocation of each Lambda entrypoint in a fresh interpreter, against `import boto3`
alone (the floor every Python function on Lambda pays). Median of several fresh processes; no AWS call is made (an
empty batch, an unknown schedule), so this is the code's own start-up cost."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sitedispatch.domain.resources import FUNCTIONS
from sitedispatch.local.gateway import http_api_event

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
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


def _seconds(body: str, env: dict[str, str]) -> float:
    times = []
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", PROBE.format(body=body)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            check=True,
        )
        times.append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
    return statistics.median(times)


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


def measure(env: dict[str, str]) -> dict[str, Any]:
    env = {**env, **placeholder_settings(), "POWERTOOLS_TRACE_DISABLED": "true"}
    baseline = _seconds("import boto3", env)
    rows: dict[str, Any] = {"import_boto3_s": round(baseline, 3)}
    for role, spec in FUNCTIONS.items():
        module, _, name = spec.handler.rpartition(".")
        if role == "api":  # an HTTP API request the function refuses before any AWS request (no signed caller)
            event = json.dumps(http_api_event("GET", "/status", {}, b"", None))
        elif spec.batch_size == 0:
            event = '{"schedule": "none"}'
        else:
            event = json.dumps(MALFORMED_BATCH)
        seconds = _seconds(FIRST_INVOCATION.format(module=module, name=name, event=repr(event)), env)
        rows[role] = {
            "import_and_first_invocation_s": round(seconds, 3),
            "ratio_to_boto3": round(seconds / baseline, 2),
        }
        print(
            f"cold start {role}: {seconds:.3f} s = {seconds / baseline:.2f} x import boto3 ({baseline:.3f} s)",
            flush=True,
        )
    return rows
