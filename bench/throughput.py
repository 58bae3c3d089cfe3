"""End-to-end operations per second on the local runtime with 1, 2 and 4 worker processes, next to a raw baseline:
moto doing only what any SQS-FIFO-plus-DynamoDB consumer must (receive, one conditional PutItem, delete) for the
same number of messages at the same queue depth, with as many consumer processes.

The queue is filled first (one provision per site, every site its own group), then the consumers start: both sides
drain the same depth. Provisions carry no simulated work (reference_latency_s 0), so the figure is the pipeline's own
cost: admission, lease, attempt, handler, fenced commit, publication outbox.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import uuid
from pathlib import Path
from typing import Any

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Status
from sitedispatch.domain.settings import Settings
from sitedispatch.local.supervisor import LocalRuntime

PROVISION = {"title": "Bench", "admin_email": "bench@example.org"}


def pipeline(workdir: Path, workers: int, operations: int) -> dict[str, Any]:
    with LocalRuntime(workdir / f"pipeline-{workers}") as runtime:
        env = runtime.start_cloud(
            0,
            policy={
                "reference_latency_s": 0,
                "max_outstanding_per_principal": 100_000,
                "max_running_per_principal": 1000,
            },
        )
        os.environ.update(env)
        deps = Dependencies(Settings()).warm()
        submitter = deps.submitter()
        ids = [
            submitter.submit(
                kind="provision", site_id=f"tp-{n:04d}", principal="bench", params=PROVISION
            ).operation.operation_id
            for n in range(operations)
        ]
        started = time.monotonic()
        runtime.start_workers([("operations", 1, None, None, None)] * workers)
        ready = time.monotonic()
        deadline = ready + 600
        while time.monotonic() < deadline:
            if len(deps.operations.list(status=Status.SUCCEEDED, limit=operations)) >= operations:
                break
            time.sleep(0.2)
        took = time.monotonic() - ready
        done = len(deps.operations.list(status=Status.SUCCEEDED, limit=operations))
    return {
        "workers": workers,
        "operations": operations,
        "succeeded": done,
        "seconds": round(took, 2),
        "ops_per_s": round(done / took, 2),
        "startup_s": round(ready - started, 2),
        "ids_sample": ids[:1],
    }


def _raw_consumer(
    endpoint_env: dict[str, str], queue_url: str, table: str, stop_after: int, counter: Any, ready: Any, go: Any
) -> None:
    os.environ.update(endpoint_env)
    import boto3

    session = boto3.session.Session(region_name="us-east-1")
    sqs, dynamodb = session.client("sqs"), session.client("dynamodb")
    sqs.get_queue_attributes(QueueUrl=queue_url)  # connections up before the clock starts, like a warm worker
    with ready.get_lock():
        ready.value += 1
    go.wait()
    while True:
        with counter.get_lock():
            if counter.value >= stop_after:
                return
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=0)
        for message in got.get("Messages", []):
            with contextlib.suppress(dynamodb.exceptions.ConditionalCheckFailedException):  # a redelivery
                dynamodb.put_item(
                    TableName=table, Item={"id": {"S": message["Body"]}}, ConditionExpression="attribute_not_exists(id)"
                )
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            with counter.get_lock():
                counter.value += 1


def raw(workdir: Path, consumers: int, operations: int) -> dict[str, Any]:
    with LocalRuntime(workdir / f"raw-{consumers}") as runtime:
        env = runtime.start_cloud(0)
        os.environ.update(env)
        import boto3

        session = boto3.session.Session(region_name="us-east-1")
        sqs, dynamodb = session.client("sqs"), session.client("dynamodb")
        name = f"raw-{uuid.uuid4().hex[:8]}"
        url = sqs.create_queue(
            QueueName=f"{name}.fifo",
            Attributes={
                "FifoQueue": "true",
                "DeduplicationScope": "messageGroup",
                "FifoThroughputLimit": "perMessageGroupId",
                "VisibilityTimeout": "60",
            },
        )["QueueUrl"]
        dynamodb.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for n in range(operations):  # the same depth: one message per site group
            sqs.send_message(
                QueueUrl=url, MessageBody=f"op-{n}", MessageGroupId=f"tp-{n:04d}", MessageDeduplicationId=f"op-{n}"
            )
        counter, ready, go = multiprocessing.Value("i", 0), multiprocessing.Value("i", 0), multiprocessing.Event()
        processes = [
            multiprocessing.Process(target=_raw_consumer, args=(env, url, name, operations, counter, ready, go))
            for _ in range(consumers)
        ]
        for process in processes:
            process.start()
        while ready.value < consumers:
            time.sleep(0.05)
        started = time.monotonic()
        go.set()
        for process in processes:
            process.join(600)
        took = time.monotonic() - started
    return {
        "consumers": consumers,
        "operations": operations,
        "done": counter.value,
        "seconds": round(took, 2),
        "ops_per_s": round(counter.value / took, 2),
    }


def measure(workdir: Path, workers: list[int], operations: int) -> dict[str, Any]:
    rows = []
    for n in workers:
        ours = pipeline(workdir, n, operations)
        baseline = raw(workdir, n, operations)
        ratio = round(ours["ops_per_s"] / baseline["ops_per_s"], 3)
        rows.append({"workers": n, "pipeline": ours, "raw": baseline, "ratio_pipeline_to_raw": ratio})
        print(
            f"throughput, {n} worker(s), {operations} provisions queued: pipeline {ours['ops_per_s']} ops/s, raw "
            f"moto receive+put+delete {baseline['ops_per_s']} ops/s (ratio {ratio})",
            flush=True,
        )
    return {"operations": operations, "runs": rows}
