"""One end-to-end run of the local runtime with its queues and bucket on LocalStack (a second, independent emulator)
and its tables on moto: `make test-localstack` runs it (SITEDISPATCH_LOCALSTACK_PYTHON names LocalStack's
environment); elsewhere it is deselected (marker `second_emulator`, tests/conftest.py).

Through the CLI, as a user drives it: three sites provisioned at once, an uploaded export imported in several steps
(checkpoints, heartbeats and hand-overs move the message's visibility on LocalStack's SQS), a malformed export dead
in the DLQ with its evidence and redriven with the fixed file, every site's home page read from its live revision in
LocalStack's S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from sitedispatch.local.localstack import localstack_python, running_localstack
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.publication.live import object_key
from tests.acceptance.conftest import wait_for
from tests.unit.conftest import FIXTURES, THEME_TEST_DATA

pytestmark = [pytest.mark.acceptance, pytest.mark.integration, pytest.mark.second_emulator]
SITES = ["ls-site-a", "ls-site-b", "ls-site-c"]
LOCALSTACK = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1")


@pytest.fixture
def sqs_s3(tmp_path: Path) -> Any:
    python = localstack_python()
    assert python is not None  # the marker deselects this test unless LocalStack is asked for
    with running_localstack(python, tmp_path / "localstack") as endpoint:
        yield endpoint


class Cli:
    """The CLI as its own process, finding the runtime through its env file (a user's shell, no AWS variables)."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self.base = [sys.executable, "-m", "sitedispatch", "--env-file", str(runtime.env_file)]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SITEDISPATCH_", "AWS_"))}

    def __call__(self, *args: str, ok: bool = True) -> Any:
        done = subprocess.run(
            [*self.base, *args, "--json"], capture_output=True, text=True, env=self.env, timeout=120, check=False
        )
        if ok:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return json.loads(done.stdout) if done.stdout.strip() else None


def test_the_local_runtime_runs_end_to_end_with_sqs_and_s3_on_localstack(
    runtime: LocalRuntime, sqs_s3: str, tmp_path: Path
) -> None:
    # Given the local runtime whose queues and bucket live on LocalStack, imports in steps of 20 items, one step an
    # invocation (10 s steps in a 10 s function: each invocation hands over to the next through the queue)
    policy = {"import_step_items": 20, "import_step_s": 10}
    env = runtime.start_cloud(0, function_timeout_s=10, policy=policy, sqs_s3_endpoint=sqs_s3)
    assert env["AWS_ENDPOINT_URL_SQS"] == env["AWS_ENDPOINT_URL_S3"] == sqs_s3 != env["AWS_ENDPOINT_URL"]
    assert env["SITEDISPATCH_OPERATIONS_QUEUE_URL"].startswith(f"{sqs_s3}/")
    runtime.start_api()
    runtime.start_workers(
        [("operations", 3, None, None, None), ("bulk", 1, None, None, None), ("publications", 2, None, None, None)]
    )
    cli = Cli(runtime)

    # When three sites are provisioned at once, one imports an export in steps and another a malformed one
    provisions = [
        cli("submit", "provision", "--site", site, "--param", f"title={site}", "--param", "admin_email=a@b.co")
        for site in SITES
    ]
    for submitted in provisions:
        assert cli("ops", "wait", submitted["operation_id"], "--timeout", "60")["status"] == "succeeded"
    imported = cli("submit", "import", "--site", SITES[0], "--input-file", str(THEME_TEST_DATA))
    poisoned = cli("submit", "import", "--site", SITES[1], "--input-file", str(FIXTURES / "malformed.xml"))

    # Then the import commits once, in several steps, and its publication goes live
    done = cli("ops", "wait", imported["operation_id"], "--timeout", "120")
    assert done["status"] == "succeeded" and done["attempt"] == 1
    commits = wait_for(
        lambda: len((h := cli("sites", "history", SITES[0]))["commits"]) == 2 and h["commits"],
        timeout_s=10,
        what="the import's commit in the site's history",
    )
    assert [c["operation_id"] for c in commits] == [imported["operation_id"], provisions[0]["operation_id"]]
    steps = commits[0]["summary"]["steps"]
    assert steps >= 3 and commits[0]["summary"]["resumed_from_step"] >= 1  # 79 items, 20 a step, continued
    assert done["fence"] - commits[1]["fence"] >= steps  # an invocation per step, each under the next fence
    wait_for(lambda: cli("sites", "get", SITES[0])["live_seq"] == 2, timeout_s=60, what="the import's publication live")
    home = cli("sites", "read", SITES[0], "/")
    assert home["seq"] == 2 and "<html" in home["content"].lower()

    # and the malformed one is dead with its evidence, its DLQ message on LocalStack, and redriven with the fix
    dead = cli("ops", "wait", poisoned["operation_id"], "--timeout", "60", ok=False)
    assert dead["status"] == "dead"
    letter = wait_for(lambda: cli("dlq", "list"), timeout_s=10, what="the dead letter listed")[0]
    assert letter["operation_id"] == poisoned["operation_id"] and letter["evidence"]["error_code"] == "wxr_malformed"
    sqs = LOCALSTACK.client("sqs", endpoint_url=sqs_s3)
    dlq_depth = sqs.get_queue_attributes(
        QueueUrl=env["SITEDISPATCH_BULK_DLQ_URL"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]["ApproximateNumberOfMessages"]
    assert dlq_depth == "1"
    redriven = cli(
        "dlq",
        "redrive",
        "--operation",
        poisoned["operation_id"],
        "--input-file",
        str(THEME_TEST_DATA),
        "--reason",
        "fixed",
    )
    assert redriven["redriven"] == [poisoned["operation_id"]] and redriven["dlq_messages_removed"] == 1
    assert cli("ops", "wait", poisoned["operation_id"], "--timeout", "120")["status"] == "succeeded"

    # and every site's live home page is read from its revision's objects in LocalStack's S3
    s3 = LOCALSTACK.client("s3", endpoint_url=sqs_s3)
    wait_for(lambda: cli("sites", "get", SITES[1])["live_seq"] == 2, timeout_s=60, what="the redriven import live")
    for site in SITES:
        live = cli("sites", "read", site, "/")
        stored = s3.get_object(Bucket=env["SITEDISPATCH_BUCKET"], Key=object_key(site, live["revision_id"], "/"))
        assert stored["Body"].read().decode() == live["content"]
