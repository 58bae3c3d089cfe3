"""Submit and the Lambda entrypoint against moto: real queue messages, real batches, real conditional writes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sitedispatch.aws.sqs import queue_arn_from_url
from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import IdempotencyConflict
from sitedispatch.domain.model import QueueMessage, Status, sha256_hex
from sitedispatch.local.esm import LambdaContext, settle, sqs_event
from sitedispatch.operations.submission import INLINE_INPUT_BYTES
from sitedispatch.operations.worker import op_input
from tests.conftest import Cloud, assert_committed_once
from tests.factories import PROVISION, present


@pytest.fixture
def entrypoint(cloud: Cloud) -> Iterator[Any]:
    """The operations worker Lambda with its per-container caches reset to this test's resources."""
    import sitedispatch.functions.operations_worker as module
    from sitedispatch.functions.runtime import dependencies

    dependencies.cache_clear()
    module.worker.cache_clear()
    yield module
    dependencies.cache_clear()
    module.worker.cache_clear()


def receive(cloud: Cloud, n: int = 10) -> list[dict[str, Any]]:
    return cloud.deps.sqs.receive_message(
        QueueUrl=cloud.settings.operations_queue_url,
        MaxNumberOfMessages=n,
        WaitTimeSeconds=1,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", [])


def invoke(module: Any, cloud: Cloud, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Invoke the real handler with the real event, then settle the batch as the event source mapping does."""
    event = sqs_event(messages, queue_arn_from_url(cloud.settings.operations_queue_url, "us-east-1"), "us-east-1")
    response = module.handler(event, LambdaContext("OperationsWorker", 30, 512, "us-east-1", time.time()))
    settle(cloud.deps.sqs, cloud.settings.operations_queue_url, messages, response)
    return response


def submit(cloud: Cloud, site: str, key: str | None = None, **params: str) -> str:
    return (
        cloud.deps.submitter()
        .submit(
            kind="provision", site_id=site, principal="tenant-a", params={**PROVISION, **params}, idempotency_key=key
        )
        .operation.operation_id
    )


LONG_URL = "https://example.org/" + "a" * INLINE_INPUT_BYTES


def test_submit_stores_input_row_and_a_site_grouped_message(cloud: Cloud) -> None:
    op_id = submit(cloud, "acme-blog", key="k1")

    op = cloud.deps.operations.get(op_id)
    assert op is not None and op.status == Status.QUEUED
    assert sha256_hex(op_input(cloud.deps.blobs, op)) == op.input_digest and op.inline_input is not None
    large = cloud.deps.operations.get(submit(cloud, "acme-blog", key="k2", url=LONG_URL))
    assert large is not None and large.inline_input is None  # over the inline size: in S3
    assert sha256_hex(cloud.deps.blobs.get(large.input_key)) == large.input_digest
    message, _ = receive(cloud)
    assert json.loads(message["Body"]) == {
        "operation_id": op_id,
        "site_id": "acme-blog",
        "principal": "tenant-a",
        "lane": "operations",
    }
    assert message["Attributes"]["MessageGroupId"] == "acme-blog"
    assert message["Attributes"]["MessageDeduplicationId"] == f"{op_id}-e0"


def test_idempotent_resubmit_and_conflict_against_dynamodb(cloud: Cloud) -> None:
    first = submit(cloud, "acme-blog", key="same")
    assert submit(cloud, "acme-blog", key="same") == first
    with pytest.raises(IdempotencyConflict):
        submit(cloud, "acme-blog", key="same", title="Different")
    assert len(receive(cloud)) == 1


def test_a_failing_site_in_a_batch_does_not_fail_another_sites_messages(cloud: Cloud, entrypoint: Any) -> None:
    # Given two operations of site A, the first of which cannot load its input (kept in S3), and one of site B
    a1 = submit(cloud, "site-a", key="a1", url=LONG_URL)
    a2 = submit(cloud, "site-a", key="a2", title="Second", url=LONG_URL)
    b1 = submit(cloud, "site-b", key="b1")
    broken = cloud.deps.operations.get(a1)
    assert broken is not None
    cloud.deps.s3.delete_object(Bucket=cloud.settings.bucket, Key=broken.input_key)
    cloud.deps.s3.delete_object(Bucket=cloud.settings.bucket, Key=cloud.deps.operations.get(a2).input_key)  # type: ignore[union-attr]
    messages = receive(cloud)
    assert sorted(json.loads(m["Body"])["operation_id"] for m in messages) == sorted([a1, a2, b1])
    ids = {json.loads(m["Body"])["operation_id"]: m["MessageId"] for m in messages}

    # When one batch carries all three
    response = invoke(entrypoint, cloud, messages)

    # Then A's messages are reported failed (a2 skipped behind a1, untouched) and B's succeeded
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted([ids[a1], ids[a2]])
    assert cloud.deps.operations.get(b1).status == Status.SUCCEEDED  # type: ignore[union-attr]
    failed = cloud.deps.operations.get(a1)
    assert failed is not None and failed.status == Status.QUEUED and failed.attempt == 1
    assert failed.error is not None and failed.error.retryable
    skipped = cloud.deps.operations.get(a2)
    assert skipped is not None and skipped.attempt == 0 and skipped.status == Status.QUEUED
    assert cloud.deps.sites.get("site-b").head_version == 1  # type: ignore[union-attr]


def test_lease_conflict_defers_the_message_without_an_attempt(cloud: Cloud, entrypoint: Any) -> None:
    op_id = submit(cloud, "acme-blog", key="k")
    cloud.deps.sites.claim_lease("acme-blog", "op_someone_else", time.time(), 30)
    [message] = receive(cloud)

    response = invoke(entrypoint, cloud, [message])

    assert response["batchItemFailures"] == [{"itemIdentifier": message["MessageId"]}]
    assert cloud.deps.operations.get(op_id).attempt == 0  # type: ignore[union-attr]
    # its visibility was pushed out: the message is not receivable right away
    assert receive(cloud) == []


@pytest.mark.guarantee
def test_entrypoint_commits_once_across_duplicate_messages(cloud: Cloud, entrypoint: Any) -> None:
    op_id = submit(cloud, "acme-blog", key="k")
    op = cloud.deps.operations.get(op_id)
    assert op is not None
    # a duplicate outside SQS's deduplication (as a reconciler re-send or a redrive would produce)
    cloud.deps.queue.send(QueueMessage(op_id, "acme-blog"), f"{op.dedup_id}-dup", "operations")

    first = receive(cloud, 1)
    assert invoke(entrypoint, cloud, first)["batchItemFailures"] == []
    second = receive(cloud, 1)
    assert invoke(entrypoint, cloud, second)["batchItemFailures"] == []

    assert_committed_once(cloud.deps, "acme-blog", [op_id])
    assert cloud.deps.sites.get("acme-blog").fence == 1  # type: ignore[union-attr]


def test_malformed_message_is_acknowledged_not_retried_forever(cloud: Cloud, entrypoint: Any) -> None:
    cloud.deps.sqs.send_message(
        QueueUrl=cloud.settings.operations_queue_url,
        MessageBody="not json",
        MessageGroupId="acme-blog",
        MessageDeduplicationId="junk",
    )
    messages = receive(cloud)
    assert invoke(entrypoint, cloud, messages) == {"batchItemFailures": []}


@pytest.mark.guarantee
def test_stale_fence_is_rejected_by_dynamodb_not_by_the_client(cloud: Cloud) -> None:
    """Skip every client-side check and write straight through the commit port with an old fence."""
    from sitedispatch.domain.errors import StaleFence
    from sitedispatch.domain.model import Commit, Kind
    from sitedispatch.domain.ports import PreparedCommit

    op_id = submit(cloud, "acme-blog", key="k")
    now = time.time()
    old = cloud.deps.sites.claim_lease("acme-blog", op_id, now, 1)
    cloud.deps.operations.start_attempt(op_id, old.fence, now)
    cloud.deps.sites.claim_lease("acme-blog", op_id, now + 2, 30)  # same operation, redelivered: fence moved on
    commit = Commit(op_id, "acme-blog", Kind.PROVISION, 1, "r" * 64, None, old.fence, now, {})

    with pytest.raises(StaleFence):
        cloud.deps.commits.commit(PreparedCommit(commit, old, 0, {}), now)
    assert cloud.deps.commits.get(op_id) is None


@pytest.mark.guarantee
def test_the_same_message_processed_by_two_workers_at_once_commits_once(cloud: Cloud) -> None:
    """Two workers, one message, truly concurrent (threads against DynamoDB on moto): the lease claim and the fenced
    commit let exactly one of them commit; the other defers or finds the commit."""
    import threading

    from tests.fakes import RecordingVisibility

    op_id = submit(cloud, "acme-blog", key="k")
    workers = [cloud.as_function("operations").worker(), cloud.as_function("bulk").worker()]  # each as deployed
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def deliver(worker: Any) -> None:
        barrier.wait()
        results.append(worker.process(QueueMessage(op_id, "acme-blog"), RecordingVisibility()))

    threads = [threading.Thread(target=deliver, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(results) == 2
    assert_committed_once(cloud.deps, "acme-blog", [op_id])
    assert present(cloud.deps.operations.get(op_id)).status == Status.SUCCEEDED
    winner, loser = sorted(results, key=lambda r: r.reason != "committed")
    assert (winner.outcome, winner.reason) == (Outcome.SUCCEEDED, "committed")
    # the other one found the commit, or the lease held, or the operation finished under it: never a second commit
    losing = {
        (Outcome.SUCCEEDED, "already_committed"),
        (Outcome.ACKED, "already_succeeded"),
        (Outcome.ACKED, "terminal_meanwhile"),
        (Outcome.DEFERRED, "lease_held"),
        (Outcome.DEFERRED, "lease_lost"),
        (Outcome.DEFERRED, "attempt_race"),
    }
    assert (loser.outcome, loser.reason.split(":")[0]) in losing, loser
