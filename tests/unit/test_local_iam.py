"""The local cloud's IAM enforcement: which (action, resource) pairs a request is judged on, as AWS judges them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sitedispatch.local.iam import CallLog, access_key_of, requested

ACCOUNT, REGION = "123456789012", "us-east-1"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table"


@dataclass
class Handler:
    body: Any
    current_account: str = ACCOUNT
    region: str = REGION


def test_a_query_on_an_index_is_judged_on_the_index_and_an_item_read_on_the_table() -> None:
    query = {"TableName": "ops", "IndexName": "by-site", "KeyConditionExpression": "x"}
    assert requested(Handler(json.dumps(query)), "dynamodb:Query", "*") == [
        ("dynamodb:Query", f"{TABLE}/ops/index/by-site")
    ]
    assert requested(Handler({"TableName": "ops", "Key": {}}), "dynamodb:GetItem", "*") == [
        ("dynamodb:GetItem", f"{TABLE}/ops")
    ]


def test_a_transaction_is_judged_item_by_item_on_each_items_own_action() -> None:
    body: dict[str, Any] = {
        "TransactItems": [
            {"Put": {"TableName": "ops", "Item": {}}},
            {"Update": {"TableName": "sites", "Key": {}}},
            {"ConditionCheck": {"TableName": "sites", "Key": {}}},
            {"Delete": {"TableName": "counters", "Key": {}}},
        ]
    }
    assert requested(Handler(body), "dynamodb:TransactWriteItems", "*") == [
        ("dynamodb:ConditionCheckItem", f"{TABLE}/sites"),
        ("dynamodb:DeleteItem", f"{TABLE}/counters"),
        ("dynamodb:PutItem", f"{TABLE}/ops"),
        ("dynamodb:UpdateItem", f"{TABLE}/sites"),
    ]


def test_a_batch_is_judged_on_every_table_it_names() -> None:
    body: dict[str, Any] = {"RequestItems": {"b": [], "a": []}}
    assert requested(Handler(body), "dynamodb:BatchWriteItem", "*") == [
        ("dynamodb:BatchWriteItem", f"{TABLE}/a"),
        ("dynamodb:BatchWriteItem", f"{TABLE}/b"),
    ]


def test_sqs_batches_are_judged_as_their_single_action_and_events_on_their_bus() -> None:
    queue = f"arn:aws:sqs:{REGION}:{ACCOUNT}:q.fifo"
    assert requested(Handler({}), "sqs:DeleteMessageBatch", queue) == [("sqs:DeleteMessage", queue)]
    assert requested(Handler({}), "sqs:SendMessageBatch", queue) == [("sqs:SendMessage", queue)]
    entries = {"Entries": [{"EventBusName": "stack-events"}, {"EventBusName": "stack-events"}, {}]}
    assert requested(Handler(entries), "events:PutEvents", "*") == [
        ("events:PutEvents", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"),
        ("events:PutEvents", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/stack-events"),
    ]


def test_a_secret_not_yet_created_is_judged_on_its_name() -> None:
    body = {"Name": "sitedispatch-webhooks/p/e1"}
    assert requested(Handler(body), "secretsmanager:CreateSecret", "*") == [
        ("secretsmanager:CreateSecret", f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:sitedispatch-webhooks/p/e1")
    ]


def test_only_assumed_role_keys_are_judged_and_the_log_keeps_each_call_once() -> None:
    header = "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20261206/us-east-1/sqs/aws4_request, SignedHeaders=host"
    assert access_key_of({"Authorization": header}) == "ASIAEXAMPLE"
    assert access_key_of({}) == ""
    log = CallLog()
    log.add("role", "sqs:SendMessage", "q", True)
    log.add("role", "sqs:SendMessage", "q", True)
    log.add("role", "sqs:DeleteMessage", "q", False)
    assert len(log.calls()) == 2 and log.denied() == [
        {"role": "role", "action": "sqs:DeleteMessage", "resource": "q", "allowed": False}
    ]


def test_a_denial_a_test_makes_on_purpose_is_not_kept_but_what_is_allowed_meanwhile_is() -> None:
    log = CallLog()
    with log.denials_expected():
        log.add("role", "sqs:SendMessage", "q", False)
        log.add("role", "sqs:ReceiveMessage", "q", True)
    log.add("role", "sqs:DeleteMessage", "q", False)
    assert [(c["action"], c["allowed"]) for c in log.calls()] == [
        ("sqs:DeleteMessage", False),
        ("sqs:ReceiveMessage", True),
    ]
