"""G13 in one process: the template deployed into moto, resource by resource as declared, and IAM judging a
function's calls against its role (the local runtime's processes run under these roles:
tests/acceptance/test_deployed_as_declared.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from sitedispatch.domain.resources import FUNCTIONS, QUEUES, REDRIVE_BACKSTOP_RECEIVES, visibility_timeout_s
from sitedispatch.domain.settings import Settings
from sitedispatch.local.cloud import LOCAL_READER, deploy_local
from sitedispatch.local.deployment import Deployment
from sitedispatch.local.iam import CALLS, patch_moto_iam_enforcement
from sitedispatch.local.template import local_context, resources_of, synthesized

TIMEOUT_S = 10


@pytest.fixture(scope="module")
def deployed(moto_endpoint: str) -> Iterator[tuple[Settings, Deployment]]:
    patch_moto_iam_enforcement()  # judges assumed-role keys only: the other tests' `testing` keys act as admin
    yield deploy_local(moto_endpoint, prefix="declared", function_timeout_s=TIMEOUT_S)


def template() -> dict[str, Any]:
    return synthesized(local_context(TIMEOUT_S, "operator", LOCAL_READER))


def as_function(moto_endpoint: str, deployment: Deployment, role: str) -> boto3.session.Session:
    credentials = deployment.functions[role].credentials
    return boto3.session.Session(
        region_name="us-east-1",
        aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=credentials["AWS_SESSION_TOKEN"],
    )


def test_every_queue_and_table_is_created_from_its_own_properties_in_the_template(
    deployed: tuple[Settings, Deployment], moto_endpoint: str
) -> None:
    settings, _ = deployed
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint, region_name="us-east-1")
    for spec in QUEUES.values():
        attributes = sqs.get_queue_attributes(QueueUrl=getattr(settings, spec.url_field), AttributeNames=["All"])[
            "Attributes"
        ]
        timeout = FUNCTIONS[spec.function].capped(TIMEOUT_S)
        assert attributes["FifoQueue"] == "true" and attributes["DeduplicationScope"] == "messageGroup"
        assert attributes["FifoThroughputLimit"] == "perMessageGroupId"
        assert int(attributes["VisibilityTimeout"]) == visibility_timeout_s(timeout)
        redrive = json.loads(attributes["RedrivePolicy"])
        assert redrive["maxReceiveCount"] == REDRIVE_BACKSTOP_RECEIVES
        assert redrive["deadLetterTargetArn"].endswith(getattr(settings, spec.dlq_url_field).rsplit("/", 1)[1])
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    declared = resources_of(template(), "AWS::DynamoDB::Table")
    tables = [getattr(settings, name) for name in Settings.model_fields if name.endswith("_table")]
    assert len(tables) == len(declared)
    for name in tables:
        table = dynamodb.describe_table(TableName=name)["Table"]
        props = template()["Resources"][name.split("-")[1]]["Properties"]  # `{stack}-{logical id}-{suffix}`
        indexes = {i["IndexName"] for i in props.get("GlobalSecondaryIndexes", [])}
        assert {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])} == indexes
        assert table["KeySchema"] == props["KeySchema"]
        ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        if "TimeToLiveSpecification" in props:
            assert ttl == {
                "TimeToLiveStatus": "ENABLED",
                "AttributeName": props["TimeToLiveSpecification"]["AttributeName"],
            }


def test_each_function_is_deployed_with_its_templates_environment_timeout_memory_and_own_role(
    deployed: tuple[Settings, Deployment],
) -> None:
    settings, deployment = deployed
    assert set(deployment.functions) == set(FUNCTIONS)
    assert len({f.role_arn for f in deployment.functions.values()}) == len(FUNCTIONS)
    for role, function in deployment.functions.items():
        assert (
            function.timeout_s == FUNCTIONS[role].capped(TIMEOUT_S) and function.memory_mb == FUNCTIONS[role].memory_mb
        )
        assert function.handler == FUNCTIONS[role].handler
        assert function.environment[Settings.env_name("operations_queue_url")] == settings.operations_queue_url
        assert function.environment[Settings.env_name("event_bus")] == "declared-events"  # named after the stack
        assert function.credentials["AWS_ACCESS_KEY_ID"].startswith("ASIA")
    assert {s.queue: s.function for s in deployment.event_sources.values()} == {
        q: s.function for q, s in QUEUES.items()
    }
    assert all(
        s.report_batch_item_failures and s.batch_size == FUNCTIONS[s.function].batch_size
        for s in deployment.event_sources.values()
    )
    assert {name: s.function for name, s in deployment.schedules.items()} == {
        "reconcile": "reconciler",
        "wp-events": "reconciler",
        "queue-repair": "reconciler",
    }
    assert deployment.routes and all(r.authorization == "AWS_IAM" for r in deployment.routes)


def test_a_functions_role_makes_the_calls_its_template_grants_and_no_other(
    deployed: tuple[Settings, Deployment], moto_endpoint: str
) -> None:
    settings, deployment = deployed
    session = as_function(moto_endpoint, deployment, "operations")
    dynamodb = session.client("dynamodb", endpoint_url=moto_endpoint)
    sqs = session.client("sqs", endpoint_url=moto_endpoint)
    s3 = session.client("s3", endpoint_url=moto_endpoint)
    events = session.client("events", endpoint_url=moto_endpoint)
    key = {"operation_id": {"S": "op_x"}}

    def denied(call: Any) -> str:
        with pytest.raises(ClientError) as refused:
            call()
        return str(refused.value.response["Error"]["Code"])

    # granted: its tables, their indexes by name, its bucket, the publications queue
    dynamodb.get_item(TableName=settings.operations_table, Key=key)
    dynamodb.query(
        TableName=settings.operations_table,
        IndexName="by-site",
        KeyConditionExpression="site_id = :s",
        ExpressionAttributeValues={":s": {"S": "a"}},
    )
    s3.put_object(Bucket=settings.bucket, Key="sites/a/index.html", Body=b"x")
    sqs.send_message(
        QueueUrl=settings.publications_queue_url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="d"
    )
    # not granted: a delete, the audit log (the API's alone), the webhooks queue, the bus (the events worker's)
    assert denied(lambda: dynamodb.delete_item(TableName=settings.operations_table, Key=key)) == "AccessDeniedException"
    assert (
        denied(lambda: dynamodb.put_item(TableName=settings.audit_table, Item={"principal": {"S": "p"}}))
        == "AccessDeniedException"
    )
    assert (
        denied(
            lambda: sqs.send_message(
                QueueUrl=settings.webhooks_queue_url, MessageBody="{}", MessageGroupId="g", MessageDeduplicationId="d"
            )
        )
        == "AccessDenied"
    )
    put_event = {"Source": "s", "DetailType": "t", "Detail": "{}", "EventBusName": settings.event_bus}
    assert denied(lambda: events.put_events(Entries=[put_event])) == "AccessDeniedException"
    # and each judgement was recorded, with what it named
    role = deployment.functions["operations"].role_arn.rsplit("/", 1)[1]
    mine = {(c["action"], c["allowed"]) for c in CALLS.calls() if c["role"] == role}
    assert {("dynamodb:GetItem", True), ("dynamodb:DeleteItem", False), ("events:PutEvents", False)} <= mine


def test_a_caller_holds_only_the_managed_policy_the_stack_exports_for_its_kind(
    deployed: tuple[Settings, Deployment],
) -> None:
    _, deployment = deployed
    assert deployment.may_invoke("producer", "POST", "/operations")
    assert deployment.may_invoke("producer", "GET", "/operations/op_1")
    assert not deployment.may_invoke("producer", "POST", "/reconcile")
    assert deployment.may_invoke("operator", "POST", "/reconcile")
    assert deployment.may_invoke("reader", "GET", "/status")
    assert not deployment.may_invoke("reader", "POST", "/operations")
    assert not deployment.may_invoke("stranger", "GET", "/status")
