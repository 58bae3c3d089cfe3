"""The local cloud's changes to moto keep DynamoDB's transaction semantics: a cancelled transaction leaves every item
it named as it was, whatever it had applied before the failing item."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

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
