"""checkov (a third party's rule set, `make test` runs it over the synthesized template): every finding this stack
does not fix is acknowledged on the resource, as checkov reads it (`Metadata.checkov.skip`), with its reason.

Fixed rather than acknowledged, so far: none of checkov's remaining findings is a defect of this design; each reason
says why. cdk-nag's acknowledgments live in `stacks/nag.py`.
"""

from __future__ import annotations

from aws_cdk import CfnResource, Stack
from constructs import IConstruct

CUSTOMER_KEY = (
    "encrypted at rest with an AWS-owned key; a customer-managed KMS key would add a key policy to run and a KMS "
    "request to every access for no reader this stack does not already authorize by IAM"
)
REASONS: dict[str, dict[str, str]] = {
    "AWS::Lambda::Function": {
        "CKV_AWS_115": (
            "concurrency is bounded where work arrives: each queue's event source mapping has a maximum concurrency "
            "(cdk context maxConcurrency.*) and the API stage a throttle; reserved concurrency would also take that "
            "many from the account's pool while idle"
        ),
        "CKV_AWS_116": (
            "no function is invoked asynchronously with work to lose: the workers are invoked by event source "
            "mappings (the queues have DLQs), the API synchronously, and a failed reconciler sweep is repeated by "
            "the next one a minute later (its schedule has a DLQ for failed invocations)"
        ),
        "CKV_AWS_117": (
            "the functions reach only AWS's public endpoints and WordPress origins on the internet; there is no "
            "private resource a VPC would reach, and a VPC would add NAT cost and cold-start latency"
        ),
        "CKV_AWS_173": (
            "the environment holds resource names and tuning only (no secret: WordPress credentials are read from "
            "Secrets Manager at run time); Lambda encrypts it at rest with an AWS-managed key"
        ),
    },
    "AWS::DynamoDB::Table": {"CKV_AWS_119": CUSTOMER_KEY},
    "AWS::SQS::Queue": {
        "CKV_AWS_27": "SSE-SQS (SqsManagedSseEnabled) encrypts every message at rest; messages carry only ids. "
        + CUSTOMER_KEY
    },
    "AWS::Logs::LogGroup": {
        "CKV_AWS_158": "CloudWatch Logs encrypts log data at rest; the logs hold no credentials or content. "
        + CUSTOMER_KEY
    },
}
ACCESS_LOG_BUCKET = {
    "CKV_AWS_18": "this is the access-log bucket itself: logging it into itself would log its own log deliveries",
    "CKV_AWS_21": (
        "access logs are written once by S3's log delivery and expire by lifecycle; versions would only keep "
        "deleted logs longer"
    ),
}


def skip(resource: CfnResource, reasons: dict[str, str]) -> None:
    resource.add_metadata("checkov", {"skip": [{"id": rule, "comment": why} for rule, why in sorted(reasons.items())]})


def acknowledge_checkov(stack: Stack, access_log_bucket: IConstruct) -> None:
    log_bucket = access_log_bucket.node.default_child
    assert log_bucket is not None
    for construct in stack.node.find_all():
        if not isinstance(construct, CfnResource):
            continue
        reasons = dict(REASONS.get(construct.cfn_resource_type, {}))
        if construct.node.path == log_bucket.node.path:  # jsii proxies: the same resource, maybe another object
            reasons.update(ACCESS_LOG_BUCKET)
        if reasons:
            skip(construct, reasons)
