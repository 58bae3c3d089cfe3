"""Which local figures are the emulator's: FIFO SendMessage rate and S3 conditional PUT rate on moto (the local cloud,
one Python process) and on LocalStack (when `make localstack` has installed it), on an empty queue and with a backlog.

`python -m bench.emulators` prints them and writes bench/results/emulators.json; `make bench` runs it too.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

from sitedispatch.local.cloud import in_process_cloud
from sitedispatch.local.localstack import DEFAULT_LOCALSTACK_PYTHON, running_localstack

RESULTS = Path(__file__).resolve().parent / "results"
SENDS = 200  # per sample
BACKLOG = 600  # messages queued before the second sample
PUTS = 200


def _clients(endpoint: str) -> tuple[Any, Any]:
    session = boto3.session.Session(aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1")
    return session.client("sqs", endpoint_url=endpoint), session.client("s3", endpoint_url=endpoint)


def _send_rate(sqs: Any, url: str, tag: str) -> float:
    started = time.perf_counter()
    for n in range(SENDS):
        sqs.send_message(
            QueueUrl=url, MessageBody="{}", MessageGroupId=f"site-{n}", MessageDeduplicationId=f"{tag}-{n}"
        )
    return round(SENDS / (time.perf_counter() - started), 1)


def measure_endpoint(endpoint: str) -> dict[str, float]:
    """Sends a second on an empty FIFO queue, then with BACKLOG queued; conditional PUTs a second."""
    sqs, s3 = _clients(endpoint)
    url = sqs.create_queue(QueueName="bench.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    empty = _send_rate(sqs, url, "empty")
    for n in range(BACKLOG - SENDS):
        sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId=f"g-{n}", MessageDeduplicationId=f"fill-{n}")
    backlog = _send_rate(sqs, url, "backlog")
    s3.create_bucket(Bucket="bench-bucket")
    started = time.perf_counter()
    for n in range(PUTS):
        s3.put_object(Bucket="bench-bucket", Key=f"k/{n}", Body=b"x" * 2048, IfNoneMatch="*")
    puts = round(PUTS / (time.perf_counter() - started), 1)
    return {
        "fifo_sends_per_s_empty": empty,
        f"fifo_sends_per_s_{BACKLOG}_queued": backlog,
        "s3_conditional_puts_per_s": puts,
    }


def measure() -> dict[str, Any]:
    rows: dict[str, Any] = {"sends": SENDS, "backlog": BACKLOG, "puts": PUTS}
    with in_process_cloud() as endpoint:
        rows["moto"] = measure_endpoint(endpoint)
    if DEFAULT_LOCALSTACK_PYTHON.exists():
        with tempfile.TemporaryDirectory() as tmp, running_localstack(DEFAULT_LOCALSTACK_PYTHON, Path(tmp)) as endpoint:
            rows["localstack"] = measure_endpoint(endpoint)
    else:
        rows["localstack"] = "not installed (make localstack)"
    for name in ("moto", "localstack"):
        row = rows[name]
        print(f"emulator {name}: {row}", flush=True)
    return rows


if __name__ == "__main__":
    RESULTS.mkdir(parents=True, exist_ok=True)
    from datetime import UTC, datetime

    stamp = {"date": datetime.now(UTC).isoformat(timespec="seconds")}
    (RESULTS / "emulators.json").write_text(json.dumps({**stamp, **measure()}, indent=2))
