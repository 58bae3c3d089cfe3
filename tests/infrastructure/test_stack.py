"""The synthesized template: what matters about the queues, tables and bucket, and one source of names."""

from __future__ import annotations

import json

from sitedispatch.aws.tables import table_specs
from sitedispatch.domain.resources import FUNCTIONS, QUEUES, REDRIVE_BACKSTOP_RECEIVES
from sitedispatch.domain.settings import Settings
from tests.infrastructure.conftest import resources


def test_queues_are_high_throughput_fifo_with_a_fifo_dlq_backstop(synthesized: tuple[dict, object]) -> None:
    template, _ = synthesized
    queues = {k: v for k, v in resources(template, "AWS::SQS::Queue").items() if v["Properties"].get("FifoQueue")}
    mains = {k: v["Properties"] for k, v in queues.items() if "RedrivePolicy" in v["Properties"]}
    dlqs = {k: v["Properties"] for k, v in queues.items() if "RedrivePolicy" not in v["Properties"]}
    assert len(mains) == len(QUEUES) == len(dlqs)
    for props in [*mains.values(), *dlqs.values()]:
        assert props["FifoQueue"] is True and props["SqsManagedSseEnabled"] is True
    for lane, spec in QUEUES.items():
        [props] = [p for k, p in mains.items() if k.startswith(f"Queues{spec.logical_id}")]
        assert props["ContentBasedDeduplication"] is False
        assert props["DeduplicationScope"] == "messageGroup"
        assert props["FifoThroughputLimit"] == "perMessageGroupId"
        assert props["RedrivePolicy"]["maxReceiveCount"] == REDRIVE_BACKSTOP_RECEIVES
        # AWS's guidance: at least 6 x the timeout of the function its event source mapping invokes
        assert props["VisibilityTimeout"] >= 6 * FUNCTIONS[spec.function].timeout_s, lane
    policies = resources(template, "AWS::SQS::QueuePolicy")
    assert policies and all("aws:SecureTransport" in json.dumps(p) for p in policies.values())


def test_tables_match_the_models_and_are_protected(synthesized: tuple[dict, object]) -> None:
    template, _ = synthesized
    tables = resources(template, "AWS::DynamoDB::Table")
    assert len(tables) == len(table_specs())
    for spec in table_specs().values():
        [table] = [t for k, t in tables.items() if k.startswith(f"Tables{spec.logical_id}")]
        props = table["Properties"]
        assert table["DeletionPolicy"] == "Retain" and props["DeletionProtectionEnabled"] is True
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert props["SSESpecification"]["SSEEnabled"] is True
        assert props["KeySchema"][0] == {"AttributeName": spec.partition.name, "KeyType": "HASH"}
        indexes = {i["IndexName"]: i for i in props.get("GlobalSecondaryIndexes", [])}
        assert set(indexes) == {i.name for i in spec.indexes}
        assert {n: i["Projection"]["ProjectionType"] for n, i in indexes.items()} == {
            i.name: i.projection for i in spec.indexes
        }
        if (
            spec.ttl_attribute
        ):  # per-minute statistics, events and deliveries past the feed's retention expire; nothing else
            assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        else:
            assert "TimeToLiveSpecification" not in props
    assert {role for role, spec in table_specs().items() if spec.ttl_attribute} == {
        "counters",
        "events",
        "feed",
        "deliveries",
    }


def test_bucket_is_private_tls_only_encrypted_versioned_and_retained(synthesized: tuple[dict, object]) -> None:
    template, _ = synthesized
    buckets = resources(template, "AWS::S3::Bucket")
    [bucket] = [b for b in buckets.values() if "VersioningConfiguration" in b["Properties"]]
    props = bucket["Properties"]
    assert bucket["DeletionPolicy"] == "Retain"
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["VersioningConfiguration"]["Status"] == "Enabled"
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
    assert set(rules) == {"expire-inputs", "expire-uploads", "evidence", "expire-noncurrent"}
    assert rules["evidence"]["Prefix"] == "evidence/" and rules["evidence"]["ExpirationInDays"] >= 365
    assert props["LoggingConfiguration"]["DestinationBucketName"]  # server access logs
    [policy] = [
        p
        for p in resources(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": next(k for k, b in buckets.items() if b is bucket)}
    ]
    deny = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert deny and deny[0]["Condition"]["Bool"]["aws:SecureTransport"] == "false"


def test_function_environment_uses_the_settings_names_and_covers_every_resource(
    synthesized: tuple[dict, object],
) -> None:
    _, stack = synthesized
    environment = stack.function_environment()  # type: ignore[attr-defined]
    required = {Settings.env_name(name) for name, field in Settings.model_fields.items() if field.is_required()}
    assert required <= set(environment)
    assert all(name in {Settings.env_name(f) for f in Settings.model_fields} for name in environment)
