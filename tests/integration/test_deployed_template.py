"""G13 in one process: the template deployed into moto, resource by resource as declared, and IAM judging a
function's calls against its role (the local runtime's processes run under these roles:
tests/acceptance/test_deployed_as_declared.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from sitedispatch.domain.resources import FUNCTIONS, QUEUES, REDRIVE_BACKSTOP_RECEIVES, visibility_timeout_s
from sitedispatch.domain.settings import Settings
from sitedispatch.flow.admission import message_for
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
        with CALLS.denials_expected(), pytest.raises(ClientError) as refused:
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
    assert ("dynamodb:GetItem", True) in mine and not any(not allowed for _, allowed in mine)  # expected: not kept


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


def test_every_sweep_of_the_reconciler_repairs_under_its_own_role(cloud: Any) -> None:
    """The reconciler's repairs run as the template's reconciler role, each with something to repair: an orphan
    (its message lost), a batch's record its submitter left, a publication whose messages were lost, a live.json
    gone, a site with a WordPress event due, a dead letter of an operation replayed since. None is denied."""
    from sitedispatch.aws.operation_rows import unsent_record
    from sitedispatch.aws.tables import UNSENT, index_shard
    from sitedispatch.domain.model import Status
    from sitedispatch.publication.live import live_key
    from sitedispatch.reconciler import ReconcilerPolicy
    from tests.conftest import pump
    from tests.factories import PROVISION

    deps, settings = cloud.deps, cloud.settings
    submit = deps.submitter().submit
    # a live site whose live.json is gone, and whose WordPress events are due
    submit(kind="provision", site_id="live-site", principal="p", params=PROVISION)
    pump(cloud)
    deps.s3.delete_object(Bucket=settings.bucket, Key=live_key("live-site"))
    deps.models.Site("live-site").update(actions=[deps.models.Site.next_due_at.set(1.0)])
    # a provision whose publication's messages are lost
    submit(kind="provision", site_id="stalled-site", principal="p", params=PROVISION)
    pump_only(cloud, settings.operations_queue_url)
    deps.sqs.purge_queue(QueueUrl=settings.publications_queue_url)
    # an orphan: a provision whose message is lost
    orphan = submit(kind="provision", site_id="orphan-site", principal="p", params=PROVISION).operation.operation_id
    deps.sqs.purge_queue(QueueUrl=settings.operations_queue_url)
    # a batch's record its submitter left (it died before deleting it)
    deps.models.Counter(
        unsent_record(orphan), operations=[orphan], changed_at=0.0, held=index_shard(UNSENT, orphan)
    ).save()
    # a dead letter whose operation is no longer dead (it succeeded since)
    done = deps.operations.list(status=Status.SUCCEEDED, limit=10)[0]
    deps.queue.dead_letter(
        message_for(done), f"{done.dedup_id}-stale", {"operation_id": done.operation_id, "epoch": "0"}, "operations"
    )

    reconciler = cloud.as_function("reconciler").reconciler()
    reconciler.policy = ReconcilerPolicy(
        orphan_grace_s=0.0, queued_orphan_s=0.0, publication_stall_s=0.0, counter_quiet_s=0.0
    )
    swept = {name: reconciler.run(name) for name in ("reconcile", "wp-events", "queue-repair")}

    assert all(s is not None and s.failed == [] for s in swept.values()), {n: s and s.failed for n, s in swept.items()}
    repaired = {k: v for s in swept.values() if s is not None for k, v in s.repaired.items()}
    for step in (
        "orphans_resent",
        "unsent_groups_sent",
        "publications_resumed",
        "live_pointers_repaired",
        "wp_cron_submitted",
        "dlq_stale_removed",
    ):
        assert repaired[step] >= 1, (step, repaired)
    role = cloud.deployment.functions["reconciler"].role_arn.rsplit("/", 1)[1]
    assert not [c for c in CALLS.calls() if c["role"] == role and not c["allowed"]]


def pump_only(cloud: Any, url: str) -> None:
    """One queue's messages through its function, as its role (the others left waiting)."""
    import time as clock

    import sitedispatch.functions.operations_worker as operations
    from sitedispatch.aws.sqs import queue_arn_from_url
    from sitedispatch.local.esm import LambdaContext, settle, sqs_event
    from tests.conftest import as_deployed

    operations.worker.cache_clear()
    with as_deployed({"operations": operations}):
        while messages := cloud.deps.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        ).get("Messages", []):
            event = sqs_event(messages, queue_arn_from_url(url, "us-east-1"), "us-east-1")
            settle(
                cloud.deps.sqs,
                url,
                messages,
                operations.handler(event, LambdaContext("P", 60, 512, "us-east-1", clock.time())),
            )
    operations.worker.cache_clear()


def test_a_wordpress_sites_credential_is_read_by_the_operations_workers_and_nobody_else(cloud: Any) -> None:
    """The path a WordPress site's import and publication take for its application password (the local runtime's
    WordPress tests use file credentials): only the operations workers' roles read sitedispatch/ secrets."""
    from sitedispatch.aws.secrets import secret_reader
    from sitedispatch.domain.errors import PermanentError

    cloud.deps.session.client("secretsmanager").create_secret(
        Name="sitedispatch/acme-wp", SecretString='{"user": "u", "application_password": "p"}'
    )
    for role in ("operations", "bulk"):
        read = secret_reader(cloud.as_function(role).session.client("secretsmanager"))
        assert "application_password" in str(read("sitedispatch/acme-wp"))
    for role in ("publications", "webhooks", "api"):
        read = secret_reader(cloud.as_function(role).session.client("secretsmanager"))
        with CALLS.denials_expected(), pytest.raises(PermanentError, match="AccessDeniedException"):
            read("sitedispatch/acme-wp")


def test_outside_a_checkout_the_local_cloud_says_where_it_looked_in_one_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sitedispatch.domain.errors import NotConfigured
    from sitedispatch.local.template import CHECKOUT_ENV, checkout

    monkeypatch.delenv(CHECKOUT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NotConfigured) as refused:
        checkout()
    message = str(refused.value)
    assert str(tmp_path) in message and "Run this in the sitedispatch checkout" in message and "\n" not in message
    # from a folder inside the checkout, it is found above
    inside = Path(__file__).resolve().parent
    monkeypatch.chdir(inside)
    assert checkout() == inside.parents[1]


@pytest.mark.moto_only  # the judgement it looks for is moto's (LocalStack's S3 judges nothing)
def test_an_input_too_large_to_inline_is_read_from_s3_by_the_operations_workers_role(cloud: Any) -> None:
    """An input over INLINE_INPUT_BYTES is stored under inputs/ at submit (the api's role) and read there by the
    worker (the operations worker's role): the path the IAM report needs taken on every run."""
    from sitedispatch.domain.model import Status
    from sitedispatch.operations.submission import INLINE_INPUT_BYTES
    from tests.conftest import pump
    from tests.factories import PROVISION

    params = {**PROVISION, "url": "https://acme.example/" + "a" * INLINE_INPUT_BYTES}
    op_id = cloud.deps.submitter().submit(kind="provision", site_id="large-input", principal="p", params=params)
    pump(cloud)
    assert cloud.deps.operations.get(op_id.operation.operation_id).status == Status.SUCCEEDED
    role = cloud.deployment.functions["operations"].role_arn.rsplit("/", 1)[1]
    assert any(
        c["role"] == role and c["action"] == "s3:GetObject" and "/inputs/" in c["resource"] and c["allowed"]
        for c in CALLS.calls()
    )
