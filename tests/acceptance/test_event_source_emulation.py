"""The event source mapping emulation in real processes: event shape, partial batches, timeouts, host failure."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import boto3
import pytest

from sitedispatch.aws.sqs import queue_arn_from_url
from sitedispatch.local.supervisor import LocalRuntime
from tests.acceptance.conftest import wait_for

PROBES = "tests.acceptance.probe_handlers"


def probe_entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def sqs_for(env: dict[str, str]) -> Any:
    return boto3.session.Session(
        region_name=env["AWS_REGION"], aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("sqs", endpoint_url=env["AWS_ENDPOINT_URL"])


def queue_counts(sqs: Any, url: str) -> tuple[int, int]:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"]), int(
        attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"]
    )


def test_batches_carry_the_lambda_event_shape_and_only_completed_records_are_deleted(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    env = runtime.start_cloud(0, function_timeout_s=5)
    sqs, url = sqs_for(env), env["SITEDISPATCH_OPERATIONS_QUEUE_URL"]
    for i, body in enumerate(["ok-1", "fail-2", "ok-3"]):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=f"group-{i}", MessageDeduplicationId=body)
    log = tmp_path / "probe.jsonl"

    runtime.start_worker(
        "operations",
        1,
        extra=["--handler", f"{PROBES}.record_and_fail_some", "--batch-size", "10"],
        env={"PROBE_LOG": str(log)},
    )

    seen = wait_for(
        lambda: (
            {r["body"] for e in probe_entries(log) for r in e["records"]} >= {"ok-1", "fail-2", "ok-3"}
            and probe_entries(log)
        ),
        what="all three records delivered",
    )
    wait_for(lambda: queue_counts(sqs, url) == (0, 1), what="completed records deleted, failed one in flight")
    record = seen[0]["records"][0]
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == queue_arn_from_url(url, env["AWS_REGION"])
    assert set(record["attributes"]) >= {
        "ApproximateReceiveCount",
        "SentTimestamp",
        "MessageGroupId",
        "MessageDeduplicationId",
        "SequenceNumber",
    }
    assert record["receiptHandle"] and record["messageId"] and record["awsRegion"] == "us-east-1"
    assert 0 < seen[0]["remaining_ms"] <= 5000 and seen[0]["function"] == "OperationsWorker"


def test_an_invocation_past_the_timeout_is_killed_and_its_environment_replaced(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    env = runtime.start_cloud(0, function_timeout_s=5)
    sqs, url = sqs_for(env), env["SITEDISPATCH_OPERATIONS_QUEUE_URL"]
    sqs.send_message(QueueUrl=url, MessageBody="slow", MessageGroupId="g", MessageDeduplicationId="slow")
    log = tmp_path / "probe.jsonl"

    worker = runtime.start_worker(
        "operations",
        1,
        extra=["--handler", f"{PROBES}.sleep_past_timeout", "--timeout", "1"],
        env={"PROBE_LOG": str(log)},
    )

    wait_for(lambda: "environment replaced" in worker.log.read_text(), what="the timed-out environment replaced")
    text = worker.log.read_text()
    assert "Task timed out after 1 seconds" in text
    assert not any(e.get("finished") for e in probe_entries(log))
    assert queue_counts(sqs, url) == (0, 1)  # not deleted: it comes back after the visibility timeout
    assert worker.alive()


def test_killing_the_host_takes_every_environment_down(runtime: LocalRuntime) -> None:
    runtime.start_cloud(0)
    worker = runtime.start_worker("operations", 3)
    children = [int(p) for p in Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()]
    assert len(children) == 3

    os.kill(worker.pid, signal.SIGKILL)  # the host alone, not its process group

    worker.process.wait(timeout=10)
    wait_for(
        lambda: not any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in children),
        timeout_s=10,
        what="environments gone with their host",
    )


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return "gone"


@pytest.mark.guarantee
def test_batches_of_several_sites_messages_commit_each_once(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every deployed mapping takes one record a batch; with a larger batch size (as an operator may set) Lambda
    fills a FIFO batch from several message groups. The operations worker then handles several sites in one
    invocation, each its own group: every operation commits once, on moto and on the strict local cloud."""
    from sitedispatch.dependencies import Dependencies
    from sitedispatch.domain.model import Status
    from sitedispatch.domain.settings import Settings
    from sitedispatch.local.esm import SEVERAL_GROUPS
    from tests.conftest import assert_committed_once
    from tests.factories import PROVISION, present

    sites = [f"batch-site-{n}" for n in range(8)]
    env = runtime.start_cloud(0, function_timeout_s=20)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    deps = Dependencies(Settings()).warm()
    submitter = deps.submitter()
    accepted = [
        submitter.submit(kind="provision", site_id=site, principal="p", params=PROVISION).operation.operation_id
        for site in sites
    ]  # all queued before the worker polls: its first receive finds eight groups
    worker = runtime.start_worker("operations", 1, extra=["--batch-size", "10"])
    runtime.start_worker("publications", 1)

    finals = wait_for(
        lambda: (
            all(present(deps.operations.get(o)).status.terminal for o in accepted)
            and [present(deps.operations.get(o)) for o in accepted]
        ),
        timeout_s=90,
        what="every provision terminal",
    )
    assert {op.status for op in finals} == {Status.SUCCEEDED}
    for site, op_id in zip(sites, accepted, strict=True):
        assert_committed_once(deps, site, [op_id])
    assert SEVERAL_GROUPS in worker.log.read_text()  # the batches did hold several sites
