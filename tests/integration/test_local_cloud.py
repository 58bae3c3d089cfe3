"""The local cloud's changes to moto keep DynamoDB's transaction semantics: a cancelled transaction leaves every item
it named as it was, whatever it had applied before the failing item."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sitedispatch.local.strict import STRICT, Strictness
from tests.conftest import Cloud


def test_a_cancelled_transaction_puts_back_every_item_it_named(cloud: Cloud) -> None:
    client = cloud.deps.session.client("dynamodb", endpoint_url=cloud.endpoint)
    table = cloud.settings.counters_table
    client.put_item(TableName=table, Item={"counter_id": {"S": "kept"}, "value": {"N": "1"}})
    client.put_item(TableName=table, Item={"counter_id": {"S": "deleted"}, "value": {"N": "7"}})
    client.put_item(TableName=table, Item={"counter_id": {"S": "guard"}, "value": {"N": "0"}})

    with pytest.raises(ClientError) as cancelled:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"counter_id": {"S": "new"}, "value": {"N": "5"}}}},
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"counter_id": {"S": "kept"}},
                        "UpdateExpression": "SET #v = :two",
                        "ExpressionAttributeNames": {"#v": "value"},
                        "ExpressionAttributeValues": {":two": {"N": "2"}},
                    }
                },
                {"Delete": {"TableName": table, "Key": {"counter_id": {"S": "deleted"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"counter_id": {"S": "guard"}},
                        "ConditionExpression": "#v > :zero",
                        "ExpressionAttributeNames": {"#v": "value"},
                        "ExpressionAttributeValues": {":zero": {"N": "0"}},
                    }
                },
            ]
        )

    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    items = {item["counter_id"]["S"]: item["value"]["N"] for item in client.scan(TableName=table)["Items"]}
    assert items == {"kept": "1", "deleted": "7", "guard": "0"}  # nothing of the transaction stayed

    client.transact_write_items(
        TransactItems=[  # and one that succeeds applies every item
            {"Put": {"TableName": table, "Item": {"counter_id": {"S": "new"}, "value": {"N": "5"}}}},
            {"Delete": {"TableName": table, "Key": {"counter_id": {"S": "deleted"}}}},
        ]
    )
    items = {item["counter_id"]["S"]: item["value"]["N"] for item in client.scan(TableName=table)["Items"]}
    assert items == {"kept": "1", "guard": "0", "new": "5"}


def test_a_port_in_use_is_refused_with_what_to_do() -> None:
    import socket

    import pytest

    from sitedispatch.domain.errors import InvalidInput
    from sitedispatch.local.cloud import check_port_free

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidInput, match="--port 0") as refused:
            check_port_free(port)
        assert refused.value.field == "port"
    check_port_free(port)  # free again once its listener is gone
    check_port_free(0)


def test_a_visibility_change_for_a_message_another_delivery_took_is_logged_not_raised(cloud: Cloud) -> None:
    """A worker stopped past its lease resumes to find its message received again (and deleted) by the takeover:
    its deferral must still report the outcome it reached, not escape as an error."""
    from sitedispatch.aws.sqs import SqsVisibility

    sqs, url = cloud.deps.sqs, cloud.settings.operations_queue_url
    sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="d-1")
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    SqsVisibility(sqs, url, message["ReceiptHandle"]).change(30)  # gone: nothing raised
    with pytest.raises(ClientError):  # anything else still raises
        SqsVisibility(sqs, url + "-no-such-queue", message["ReceiptHandle"]).change(30)


@pytest.mark.moto_only  # the local cloud's change to moto's SQS (cloud.patch_moto_fifo_flag)
def test_a_fifo_queue_drops_a_repeated_deduplication_id_and_still_counts_its_messages(cloud: Cloud) -> None:
    """A send reads the queue's ContentBasedDeduplication alone (not every attribute, which counts the queue): the
    rules it enforces and the counts GetQueueAttributes answers are moto's as before."""
    sqs, url = cloud.deps.sqs, cloud.settings.operations_queue_url
    for n in (1, 2, 1, 3, 2):
        sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId=f"g{n}", MessageDeduplicationId=f"d-{n}")
    with pytest.raises(ClientError, match="MessageDeduplicationId"):  # no content-based deduplication on this queue
        sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId="g")
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "3" and counts["ContentBasedDeduplication"] == "false"
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, WaitTimeSeconds=1)
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("1", "2")


def test_a_visibility_past_sqss_twelve_hour_ceiling_is_clamped_to_what_is_left_of_it(cloud: Cloud) -> None:
    """SQS refuses a ChangeMessageVisibility that would take the message's visibility past 12 hours from its
    receive, in total (moto too; LocalStack accepts it); it does not shorten it. A backoff or deferral longer than
    what is left is asked for as what is left instead of failing the delivery (found here: the clamp was 12 hours
    from now, which moto refused once the receive was a second old)."""
    from sitedispatch.aws.sqs import MAX_VISIBILITY_S, RECEIVE_MARGIN_S, SqsVisibility

    sqs, url = cloud.deps.sqs, cloud.settings.operations_queue_url
    sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="d-1")
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    now = [time.time()]
    visibility = SqsVisibility(sqs, url, message["ReceiptHandle"], clock=lambda: now[0])
    if cloud.sqs_s3_endpoint is None:  # moto refuses a total past the ceiling, as AWS does
        with pytest.raises(ClientError, match="InvalidParameterValue"):
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=MAX_VISIBILITY_S
            )
    now[0] += 3_600  # an hour into this delivery (as the clock it is given says)
    assert visibility.ceiling_s() == MAX_VISIBILITY_S - 3_600 - RECEIVE_MARGIN_S
    visibility.change(50_000)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []  # hidden: it applied


@pytest.fixture
def strict() -> Iterator[Strictness]:
    """`--strict` in this process's moto, for one test (transactions held 0.2-0.4 s, so overlap is certain)."""
    STRICT.enable(seed=1, hold_s=0.4)
    try:
        yield STRICT
    finally:
        STRICT.disable()


def _bump(table: str, counter: str) -> dict[str, Any]:
    return {
        "Update": {
            "TableName": table,
            "Key": {"counter_id": {"S": counter}},
            "UpdateExpression": "ADD #v :one",
            "ExpressionAttributeNames": {"#v": "value"},
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }


def test_strict_a_request_on_an_item_a_transaction_is_in_progress_on_fails_as_on_aws(
    cloud: Cloud, strict: Strictness
) -> None:
    """A second transaction naming the item: TransactionCanceledException, reason TransactionConflict for that entry
    only; a single write to it: TransactionConflictException; an unrelated item is not held up."""
    client = cloud.deps.session.client("dynamodb", endpoint_url=cloud.endpoint)
    table = cloud.settings.counters_table
    first = threading.Thread(target=lambda: client.transact_write_items(TransactItems=[_bump(table, "shared")]))
    with strict.held_open():  # the first stays in progress until the block ends, however slow the machine
        first.start()
        deadline = time.monotonic() + 10
        while not strict.in_progress and time.monotonic() < deadline:
            time.sleep(0.005)
        assert strict.in_progress  # the first transaction is in progress (held)

        with pytest.raises(ClientError) as cancelled:
            client.transact_write_items(TransactItems=[_bump(table, "other"), _bump(table, "shared")])
        with pytest.raises(ClientError) as single:
            client.put_item(TableName=table, Item={"counter_id": {"S": "shared"}, "value": {"N": "9"}})
        client.put_item(TableName=table, Item={"counter_id": {"S": "unrelated"}, "value": {"N": "1"}})
    first.join(10)

    error = cancelled.value.response
    assert error["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in error["CancellationReasons"]] == ["None", "TransactionConflict"]
    assert single.value.response["Error"]["Code"] == "TransactionConflictException"
    items = {item["counter_id"]["S"]: item["value"]["N"] for item in client.scan(TableName=table)["Items"]}
    assert items == {"shared": "1", "unrelated": "1"}  # only the first transaction applied
    assert strict.conflicts == {"transactions": 1, "writes": 1, "s3": 0} and not strict.in_progress


def test_without_strict_overlapping_requests_are_serialized(cloud: Cloud) -> None:
    client = cloud.deps.session.client("dynamodb", endpoint_url=cloud.endpoint)
    table = cloud.settings.counters_table
    threads = [
        threading.Thread(target=lambda: client.transact_write_items(TransactItems=[_bump(table, "shared")]))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    [item] = client.scan(TableName=table)["Items"]
    assert item["value"]["N"] == "8"


def test_strict_a_global_index_read_may_lag_the_table_and_catches_up_within_the_bound(cloud: Cloud) -> None:
    """With reads lagging 0-0.5 s (seeded): a put shows in the table at once and in the counters' by-held index only
    after some reads miss it; a delete stays visible there for a while; past the bound every read agrees."""
    client = cloud.deps.session.client("dynamodb", endpoint_url=cloud.endpoint)
    table = cloud.settings.counters_table

    def held() -> list[str]:
        found = client.query(
            TableName=table,
            IndexName="by-held",
            KeyConditionExpression="#h = :h",
            ExpressionAttributeNames={"#h": "held"},
            ExpressionAttributeValues={":h": {"S": "h"}},
        )
        return [item["counter_id"]["S"] for item in found["Items"]]

    STRICT.enable(seed=3, index_lag_max_s=0.5)
    try:
        client.put_item(TableName=table, Item={"counter_id": {"S": "c1"}, "held": {"S": "h"}})
        table_sees = client.get_item(TableName=table, Key={"counter_id": {"S": "c1"}}, ConsistentRead=True)
        early = [held() for _ in range(20)]  # within the first fraction of a second
        time.sleep(0.6)
        settled = held()
        client.delete_item(TableName=table, Key={"counter_id": {"S": "c1"}})
        after_delete = [held() for _ in range(20)]
        time.sleep(0.6)
        gone = held()
        lagged = STRICT.lagged_reads
    finally:
        STRICT.disable()

    assert "Item" in table_sees  # the table itself is strongly consistent
    assert [] in early and ["c1"] in early  # some reads missed the put, some saw it (seeded)
    assert settled == ["c1"] and gone == []
    assert ["c1"] in after_delete  # the deleted item still showed in the index for a while
    assert lagged >= 42
    assert held() == []  # not strict: the index is as current as the table


def test_strict_submits_of_one_principal_at_once_all_land_their_conflicts_retried(cloud: Cloud) -> None:
    """Ten submits of one principal for one site at once meet on the site's counter (sharded counters keep a
    principal's submits to different sites apart, not one site's): on the strict cloud (as on AWS) their
    transactions conflict, and each is sent again until it lands; nothing is refused, nothing counted twice."""
    from concurrent.futures import ThreadPoolExecutor

    from sitedispatch.flow.counters import principal_group, site_counter
    from tests.factories import PROVISION

    submitter = cloud.deps.submitter()
    submitter.submit(kind="provision", site_id="one-site", principal="p", params=PROVISION)
    STRICT.enable(seed=2, hold_s=0.03)
    try:
        with ThreadPoolExecutor(10) as pool:
            results = list(
                pool.map(
                    lambda n: submitter.submit(
                        kind="wp_cron", site_id="one-site", principal="p", params={"due_minute": n}
                    ),
                    range(10),
                )
            )
        conflicts = dict(STRICT.conflicts)
    finally:
        STRICT.disable()

    assert len({r.operation.operation_id for r in results}) == 10
    assert conflicts["transactions"] >= 1  # they did meet
    assert cloud.deps.operations.counter(site_counter("one-site")) == 11
    outstanding = cloud.deps.operations.read_counters(principal_group("p", 0).shard_ids())
    assert sum(reading.value for reading in outstanding.values()) == 11


@contextmanager
def _opened_at(strict: Strictness, gate: threading.Event, kind: str, conflicts: int) -> Iterator[None]:
    """What is held open ends once `conflicts` of `kind` were met: the request under test meets it at least once,
    then finds it done when it is sent again."""

    def open_() -> None:
        deadline = time.monotonic() + 20
        while strict.conflicts[kind] < conflicts and time.monotonic() < deadline:
            time.sleep(0.005)
        gate.set()

    opener = threading.Thread(target=open_)
    opener.start()
    try:
        yield
    finally:
        gate.set()
        opener.join(20)


def _wait_until_held(strict: Strictness) -> None:
    deadline = time.monotonic() + 10
    while not strict.keys_in_progress and time.monotonic() < deadline:
        time.sleep(0.005)
    assert strict.keys_in_progress  # the first conditional PUT is in progress (held)


@pytest.mark.moto_only  # moto's S3, made strict
def test_strict_a_conditional_put_of_a_key_being_written_conditionally_gets_409_as_on_aws(
    cloud: Cloud, strict: Strictness
) -> None:
    """While one conditional PUT of a key is in progress: another of that key gets 409 ConditionalRequestConflict
    and writes nothing; a PUT of another key, or an unconditional one, is not held up."""
    s3, bucket = cloud.deps.s3, cloud.settings.bucket
    first = threading.Thread(target=lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*"))
    with strict.held_open():
        first.start()
        _wait_until_held(strict)

        with pytest.raises(ClientError) as conflict:
            s3.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
        s3.put_object(Bucket=bucket, Key="other", Body=b"x", IfNoneMatch="*")
    first.join(10)

    assert conflict.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert conflict.value.response["Error"]["Code"] == "ConditionalRequestConflict"
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"
    assert strict.conflicts["s3"] == 1 and not strict.keys_in_progress


@pytest.mark.moto_only  # moto's S3, made strict
def test_strict_the_blob_store_sends_a_409_again_and_learns_the_key_is_written(
    cloud: Cloud, strict: Strictness
) -> None:
    """The core's answer to the 409 (aws/s3.py): sent again after a short backoff, the PUT then finds the other
    write done (412): put_if_absent says "already there", replace says "changed under you"; nothing raises."""
    blobs, s3, bucket = cloud.deps.blobs, cloud.deps.s3, cloud.settings.bucket
    first = threading.Thread(target=lambda: s3.put_object(Bucket=bucket, Key="page", Body=b"A", IfNoneMatch="*"))
    with strict.held_open() as gate:
        first.start()
        _wait_until_held(strict)
        with _opened_at(strict, gate, "s3", 1):
            written = blobs.put_if_absent("page", b"A")
    first.join(10)
    assert written is False and blobs.get("page") == b"A"

    stored = blobs.read_versioned("page")
    assert stored is not None
    second = threading.Thread(target=lambda: s3.put_object(Bucket=bucket, Key="page", Body=b"B", IfMatch=stored[1]))
    with strict.held_open() as gate:
        second.start()
        _wait_until_held(strict)
        with _opened_at(strict, gate, "s3", 2):
            replaced = blobs.replace("page", b"C", stored[1])
    second.join(10)
    assert replaced is False and blobs.get("page") == b"B"
    assert strict.conflicts["s3"] >= 2  # each met the other write at least once


def test_conditional_puts_of_one_key_at_once_let_exactly_one_write(cloud: Cloud) -> None:
    """What the fence of every immutable object relies on: of many conditional PUTs of one key at once, one writes
    and the others are refused (moto checks and writes with no lock between; no race was seen in 100 x 8 here)."""
    from concurrent.futures import ThreadPoolExecutor

    blobs = cloud.deps.blobs
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda n: blobs.put_if_absent("contested", f"body {n}".encode()), range(64)))
    assert results.count(True) == 1
    assert blobs.get("contested") == f"body {results.index(True)}".encode()


def test_strict_a_single_write_refused_by_a_transaction_in_progress_is_sent_again(
    cloud: Cloud, strict: Strictness
) -> None:
    """DynamoDB refuses a single write on an item a transaction is in progress on (TransactionConflictException) and
    botocore does not retry it: the stores' writes (aws/writes.py `single_write`, `conditionally`) send it again, so it
    lands after the transaction instead of failing the delivery or the request."""
    from sitedispatch.aws.flow import DynamoMinuteBuckets
    from sitedispatch.aws.writes import conditionally

    client = cloud.deps.session.client("dynamodb", endpoint_url=cloud.endpoint)
    table, C = cloud.settings.counters_table, cloud.deps.models.Counter

    def held_transaction() -> threading.Thread:
        thread = threading.Thread(target=lambda: client.transact_write_items(TransactItems=[_bump(table, "shared")]))
        thread.start()
        deadline = time.monotonic() + 10
        while not strict.in_progress and time.monotonic() < deadline:
            time.sleep(0.005)
        assert strict.in_progress
        return thread

    with strict.held_open() as gate:
        first = held_transaction()
        with _opened_at(strict, gate, "writes", 1):  # met it, waited, landed
            assert conditionally(lambda: C("shared").update(actions=[C.value.add(1)])) is True
    first.join(10)
    assert client.get_item(TableName=table, Key={"counter_id": {"S": "shared"}})["Item"]["value"]["N"] == "2"
    with strict.held_open() as gate:
        second = held_transaction()
        with _opened_at(strict, gate, "writes", 2):  # an unconditional ADD, likewise
            DynamoMinuteBuckets(cloud.deps.models).add("shared", 1, 1, 1)
    second.join(10)
    assert strict.conflicts["writes"] >= 2 and not strict.in_progress


def test_a_second_emulator_where_nothing_answers_is_refused_in_one_line() -> None:
    """`local cloud --sqs-s3-endpoint URL` with nothing listening there: exit 2 with what to do, nothing created."""
    import socket

    from sitedispatch.domain.errors import InvalidInput
    from sitedispatch.local.cloud import check_answers

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        check_answers(f"http://127.0.0.1:{port}")  # something answers: accepted
    with pytest.raises(InvalidInput, match="start LocalStack there first") as refused:
        check_answers(f"http://127.0.0.1:{port}")  # its listener is gone
    assert refused.value.field == "sqs_s3_endpoint"


def test_a_message_received_past_the_redrive_backstop_moves_to_its_dead_letter_queue(cloud: Cloud) -> None:
    """The queues' redrive policy is a backstop far above the attempt budget (deferrals and import hand-overs each
    cost a receive): past REDRIVE_BACKSTOP_RECEIVES receives SQS moves the message to the DLQ (on moto and on
    LocalStack alike). Its operation's row is left as it was, so the reconciler sends it again once untouched for
    an hour (tests/unit/test_reconciler.py, the orphans test)."""
    from sitedispatch.domain.resources import REDRIVE_BACKSTOP_RECEIVES

    sqs, url, dlq = cloud.deps.sqs, cloud.settings.bulk_queue_url, cloud.settings.bulk_dlq_url
    sqs.send_message(QueueUrl=url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="d-1")
    counts = []
    for _ in range(REDRIVE_BACKSTOP_RECEIVES):
        [message] = sqs.receive_message(
            QueueUrl=url, WaitTimeSeconds=1, VisibilityTimeout=0, MessageSystemAttributeNames=["All"]
        )["Messages"]
        counts.append(int(message["Attributes"]["ApproximateReceiveCount"]))
    assert counts == list(range(1, REDRIVE_BACKSTOP_RECEIVES + 1))  # every receive counts
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", []) == []  # moved on this receive
    [moved] = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1)["Messages"]
    assert moved["Body"] == "{}"


def test_update_expressions_are_checked_as_moto_checks_them_the_first_time_and_every_time_after(cloud: Cloud) -> None:
    """The local cloud runs moto's update checks once per expression where they read only the expression (clause
    counts, overlapping paths, a key updated) and every time where they read values or the item: a refused update
    is refused again, and one that passed once is still refused where its values or its item are wrong. Every
    answer here is the one moto gives without the local cloud's patch (compared when it was written)."""
    client = cloud.deps.session.client("dynamodb", endpoint_url=cloud.endpoint)
    table = cloud.settings.counters_table

    def update(key: str, expression: str, values: dict[str, Any], names: dict[str, str] | None = None) -> None:
        client.update_item(
            TableName=table,
            Key={"counter_id": {"S": key}},
            UpdateExpression=expression,
            ExpressionAttributeNames=names or {"#v": "value"},
            ExpressionAttributeValues=values,
        )

    one = {":one": {"N": "1"}}
    for attempt in range(3):  # expression-only refusals, before and after other expressions pass
        with pytest.raises(ClientError, match="Cannot update attribute counter_id"):
            update("k", "SET #k = :one", one, {"#k": "counter_id"})
        with pytest.raises(ClientError, match="Two document paths overlap"):
            update("k", "SET #v = :one, #v = :one", one)
        with pytest.raises(ClientError, match='The "SET" section can only be used once'):
            update("k", "SET #v = :one SET changed_at = :one", one)
        update(f"ok-{attempt}", "SET changed_at = :one ADD #v :one", one)

    update("text", "SET #v = :s", {":s": {"S": "words"}})
    for _ in range(2):  # the same expression as `ok-*`, refused by what the item holds
        with pytest.raises(ClientError, match="operand in the update expression has an incorrect data type"):
            update("text", "SET changed_at = :one ADD #v :one", one)
    with pytest.raises(ClientError, match=r"unused in expressions: keys: \{:two\}"):  # and by its values
        update("ok-0", "SET changed_at = :one ADD #v :one", {":two": {"N": "2"}})
    with pytest.raises(
        ClientError, match="document path provided in the update expression is invalid"
    ):  # a path into an attribute the item does not have
        update("ok-0", "SET #m.inner = :one", one, {"#m": "missing"})

    items = {item["counter_id"]["S"]: item for item in client.scan(TableName=table)["Items"]}
    assert sorted(items) == ["ok-0", "ok-1", "ok-2", "text"]
    assert [items[f"ok-{n}"]["value"] for n in range(3)] == [{"N": "1"}] * 3
    assert items["text"]["value"] == {"S": "words"}
