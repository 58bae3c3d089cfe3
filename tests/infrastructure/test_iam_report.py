"""The IAM report: called resources named by their logical ids, grants matched by the calls they allowed."""

from __future__ import annotations

from typing import Any

from sitedispatch.local.cloud import LOCAL_READER
from sitedispatch.local.iam_report import Call, grants, logical_names, report, to_logical
from sitedispatch.local.template import local_context, resources_of, synthesized


def template() -> dict[str, Any]:
    return synthesized(local_context(10, "operator", LOCAL_READER))


def test_a_called_arn_is_named_by_the_logical_id_of_what_the_template_declared() -> None:
    t = template()
    names = logical_names(t)
    [bus] = resources_of(t, "AWS::Events::EventBus")
    [queue] = [k for k in resources_of(t, "AWS::SQS::Queue") if k.startswith("QueuesOperationsQueue")]
    [table] = [k for k in resources_of(t, "AWS::DynamoDB::Table") if k.startswith("TablesOperationsTable")]
    [bucket] = [k for k in resources_of(t, "AWS::S3::Bucket") if k.startswith("StorageBucket")]
    arn = "arn:aws:sqs:us-east-1:123456789012"
    assert to_logical(f"{arn}:t1-9-{queue}-ABCDEF123456.fifo", "t1-9", names, bus) == queue
    table_arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/t1-9-{table}-XYZ/index/by-site"
    assert to_logical(table_arn, "t1-9", names, bus) == f"{table}/index/by-site"
    assert to_logical(f"arn:aws:s3:::t1-9-{bucket.lower()}-abc/sites/acme/index.html", "t1-9", names, bus) == (
        f"{bucket}/sites/*"
    )
    assert to_logical("arn:aws:events:us-east-1:123456789012:event-bus/t1-9-events", "t1-9", names, bus) == bus
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:sitedispatch-webhooks/whk_1-AbCdEf"
    assert to_logical(secret, "t1-9", names, bus) == "secret:sitedispatch-webhooks/*"


def test_a_grant_is_used_by_a_call_it_covers_and_an_unused_one_is_listed_unless_explained() -> None:
    granted = grants(template())
    assert set(granted) == {"operations", "bulk", "publications", "events", "webhooks", "reconciler", "api"}
    [(_, sites_objects)] = [(a, r) for a, r in granted["publications"] if a == "s3:PutObject"]
    calls = [
        Call("publications", "s3:PutObject", sites_objects.replace("/*", "/acme/*"), True),
        Call("publications", "sqs:SendMessage", "QueuesWebhooksQueue583B0412", False),
    ]
    result = report(calls, {"publications": granted["publications"]})
    assert result["denied"] == [calls[1].__dict__]
    unused = {(u["action"], u["resource"]) for u in result["unused"]}
    assert ("s3:PutObject", sites_objects) not in unused and ("s3:GetObject", sites_objects) in unused
    assert any(e["action"] == "s3:ListBucket" and "404" in e["reason"] for e in result["explained"])
