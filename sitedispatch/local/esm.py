"""`sitedispatch local worker`: an event-source-mapping emulation for one queue.

The worker process is a "host". It imports the function once, then forks `concurrency` execution environments, each
an OS process that long-polls SQS, builds the real Lambda SQS event, invokes the real handler with a Lambda context,
enforces the function timeout (the environment is killed, as Lambda does) and deletes exactly the records not named in
`batchItemFailures`. Failed records keep the visibility the handler gave them. Killing the host kills every
environment with it (PR_SET_PDEATHSIG), like a host failure; SIGSTOP of the process group pauses them all.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import json
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sitedispatch.aws.sqs import queue_arn_from_url
from sitedispatch.domain.resources import FUNCTIONS, QUEUES, FunctionSpec
from sitedispatch.local.cloud import FUNCTION_TIMEOUT_ENV
from sitedispatch.local.strict import DUPLICATE_RATE, STRICT_DELETE_LOST, duplicate_chooser

TIMEOUT_EXIT = 124
PR_SET_PDEATHSIG = 1
SEVERAL_GROUPS = "batch of several message groups"  # logged by an environment for such a batch
POLL_WAIT_S = 1  # short long-poll, so an environment notices a stop request within about a second


@dataclass
class LambdaContext:
    """The attributes and method Powertools and handlers use from the real Lambda context."""

    function_name: str
    timeout_s: float
    memory_limit_in_mb: int
    region: str
    started: float
    aws_request_id: str = ""
    function_version: str = "$LATEST"

    def __post_init__(self) -> None:
        self.aws_request_id = self.aws_request_id or str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:{self.region}:123456789012:function:{self.function_name}"
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = f"local/{os.getpid()}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.started + self.timeout_s - time.time()) * 1000))


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """Lambda's SQS event from ReceiveMessage output (same field names and casing as the real event source)."""
    records = []
    for m in messages:
        attributes = {
            k: m.get("Attributes", {}).get(k)
            for k in (
                "ApproximateReceiveCount",
                "SentTimestamp",
                "SequenceNumber",
                "MessageGroupId",
                "SenderId",
                "MessageDeduplicationId",
                "ApproximateFirstReceiveTimestamp",
            )
            if k in m.get("Attributes", {})
        }
        message_attributes = {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in m.get("MessageAttributes", {}).items()
        }
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": attributes,
                "messageAttributes": message_attributes,
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


def load_handler(path: str) -> Callable[..., Any]:
    module, _, name = path.rpartition(".")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


def records_to_delete(messages: list[dict[str, Any]], response: Any) -> list[dict[str, Any]]:
    """Lambda's partial batch response rules: a malformed response fails the whole batch."""
    if response is None:
        return messages
    if not isinstance(response, dict):
        return []
    failures = response.get("batchItemFailures", [])
    if not isinstance(failures, list):
        return []
    failed = set()
    for failure in failures:
        ident = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if not ident:
            return []  # an empty or missing identifier fails the batch, as in Lambda
        failed.add(ident)
    return [m for m in messages if m["MessageId"] not in failed]


def settle(
    sqs: Any, queue_url: str, messages: list[dict[str, Any]], response: Any, lose: random.Random | None = None
) -> int:
    """Delete the records the invocation completed; the rest keep the visibility the handler set. `lose` (a strict
    local cloud): a seeded few completed records are not deleted but visible again at once, as after a lost delete."""
    done = records_to_delete(messages, response)
    if lose is not None:
        lost = [m for m in done if lose.random() < DUPLICATE_RATE]
        for message in lost:
            sqs.change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
            print(json.dumps({"level": "INFO", "message": STRICT_DELETE_LOST, "id": message["MessageId"]}), flush=True)
        done = [m for m in done if all(m is not other for other in lost)]
    if done:
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
        )
    return len(done)


class Environment:
    """One execution environment: poll, invoke, delete; runs in its own forked process."""

    def __init__(
        self,
        spec: FunctionSpec,
        queue_url: str,
        region: str,
        index: int,
        handler: Callable[[dict[str, Any], Any], Any],
        ready_fd: int | None = None,
    ) -> None:
        self.spec = spec
        self.queue_url = queue_url
        self.region = region
        self.index = index
        self.handler = handler
        self.ready_fd = ready_fd
        self.stopping = False

    def run(self) -> None:
        import boto3

        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides; Ctrl-C reaches the whole group
        signal.signal(signal.SIGALRM, self._timed_out)
        self._inject_faults()
        sqs: Any = boto3.session.Session(region_name=self.region).client("sqs")
        arn = queue_arn_from_url(self.queue_url, self.region)
        lose = duplicate_chooser(self.index)
        if self.ready_fd is not None:
            os.write(self.ready_fd, b"r")
            os.close(self.ready_fd)
        while not self.stopping:
            messages = sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=self.spec.batch_size,
                WaitTimeSeconds=POLL_WAIT_S,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                continue
            groups = {m.get("Attributes", {}).get("MessageGroupId") for m in messages}
            if len(groups) > 1:  # as Lambda may fill a FIFO batch (batch size above 1) from several groups
                print(json.dumps({"level": "INFO", "message": SEVERAL_GROUPS, "groups": len(groups)}), flush=True)
            response = self.invoke(sqs_event(messages, arn, self.region))
            settle(sqs, self.queue_url, messages, response, lose)

    def _inject_faults(self) -> None:
        """A chaos run asks (by environment) for transient AWS errors in the function's own clients."""
        from sitedispatch.local.faults import RATE_ENV, install_from_environment

        if not os.environ.get(RATE_ENV):
            return
        from sitedispatch.functions.runtime import dependencies

        deps = dependencies()
        install_from_environment(
            [deps.sqs, deps.s3, deps.models.Operation._get_connection().connection.client], self.index
        )

    def invoke(self, event: dict[str, Any]) -> Any:
        context = LambdaContext(
            self.spec.logical_id, self.spec.timeout_s, self.spec.memory_mb, self.region, time.time()
        )
        signal.setitimer(signal.ITIMER_REAL, self.spec.timeout_s)
        try:
            return self.handler(event, context)
        except Exception as exc:
            print(
                json.dumps(
                    {"level": "ERROR", "message": "invocation failed", "error": repr(exc), "environment": self.index}
                ),
                file=sys.stderr,
                flush=True,
            )
            return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _stop(self, *_: Any) -> None:
        self.stopping = True

    def _timed_out(self, *_: Any) -> None:
        print(
            json.dumps(
                {
                    "level": "ERROR",
                    "message": f"Task timed out after {self.spec.timeout_s} seconds",
                    "environment": self.index,
                }
            ),
            file=sys.stderr,
            flush=True,
        )
        os._exit(TIMEOUT_EXIT)


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def run_worker(
    queue_role: str,
    concurrency: int,
    timeout_s: int | None = None,
    batch_size: int | None = None,
    handler: str | None = None,
) -> int:
    """Host loop: fork environments, replace any that die (timeout, crash), stop all on SIGTERM/SIGINT."""
    from sitedispatch.domain.settings import Settings
    from sitedispatch.local.deployment import act_as, current_deployment

    queue = QUEUES[queue_role]
    deployed = current_deployment()
    if deployed is not None:  # the event source mapping and the function as the template deployed them
        source = deployed.event_sources[queue_role]
        deployed_function = act_as(source.function)
        assert deployed_function is not None
        spec = dataclasses.replace(deployed_function.spec(), batch_size=source.batch_size)
        concurrency = min(concurrency, source.max_concurrency)
        default_timeout = spec.timeout_s
    else:
        spec = FUNCTIONS[queue.function]
        local_timeout = os.environ.get(FUNCTION_TIMEOUT_ENV)
        default_timeout = int(local_timeout) if local_timeout else spec.timeout_s
    spec = dataclasses.replace(
        spec,
        timeout_s=timeout_s or default_timeout,
        batch_size=batch_size or spec.batch_size,
        handler=handler or spec.handler,
    )
    settings = Settings()
    queue_url = getattr(settings, queue.url_field)
    # Imported once in the host, before the environments fork: each starts as a Lambda environment does after its
    # init phase (the module imported with Lambda's variables set, so its clients are built: functions/runtime.py,
    # `init_phase`, which makes no request), without paying the init again in each.
    os.environ.update(spec.lambda_environment(settings.region))
    function = load_handler(spec.handler)
    host = os.getpid()
    children: dict[int, int] = {}
    stopping = False

    # Each first-generation environment reports on this pipe once initialised; replacements report nothing.
    ready: dict[str, int | None] = dict(zip(("r", "w"), os.pipe(), strict=True))

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _die_with_parent(host)
                if ready["r"] is not None:
                    os.close(ready["r"])
                Environment(spec, queue_url, settings.region, index, function, ready["w"]).run()
            except BaseException as exc:
                print(f"environment {index} crashed: {exc!r}", file=sys.stderr, flush=True)
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = index

    def request_stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    for index in range(concurrency):
        spawn(index)
    assert ready["r"] is not None and ready["w"] is not None
    os.close(ready["w"])
    initialised = 0
    while initialised < concurrency:  # every environment has started and is about to poll
        chunk = os.read(ready["r"], concurrency)
        if not chunk:
            break
        initialised += len(chunk)
    os.close(ready["r"])
    ready["r"] = ready["w"] = None
    print(json.dumps({"ready": True, "queue": queue_role, "concurrency": concurrency, "pid": host}), flush=True)
    deadline: float | None = None
    while children:
        if stopping and deadline is None:
            deadline = time.time() + 5.0
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if deadline is not None and time.time() > deadline:
                for child in list(children):
                    os.kill(child, signal.SIGKILL)
            time.sleep(0.05)
            continue
        index = children.pop(pid)
        if not stopping:
            code = os.waitstatus_to_exitcode(status)
            print(
                json.dumps({"level": "WARNING", "message": "environment replaced", "environment": index, "exit": code}),
                file=sys.stderr,
                flush=True,
            )
            spawn(index)
    return 0
