"""cdk-nag AwsSolutions on the whole stack (cdk-nag 3 runs as a CDK policy-validation plugin: an unacknowledged
finding fails synthesis). Every acknowledgment names the construct and the exact finding, and says why it stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, CfnElement, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

from sitedispatch.domain.resources import SECRET_NAME_PREFIX, WEBHOOK_SECRET_PREFIX, operation_workers
from sitedispatch.operator.access import READS

if TYPE_CHECKING:
    from .dispatch_stack import SiteDispatchStack

XRAY = (
    "X-Ray's PutTraceSegments and PutTelemetryRecords (added by active tracing) support no resource-level "
    "permissions: AWS documents Resource '*' for them"
)
OBJECTS = (
    "object keys are per site and per content digest, unknown until run time; the wildcard is confined to "
    "this stack's bucket and the prefix the code writes"
)
VERSIONS = (
    "CDK's LambdaInvoke grants the reconciler function and its versions (ARN:*); the scheduler invokes "
    "only this function"
)
SECRETS = (
    "WordPress sites' credentials are Secrets Manager secrets named by site, registered at run time; the "
    "wildcard is confined to this account's secrets under the sitedispatch/ prefix, which registration "
    "enforces"
)
WEBHOOK_SECRETS = (
    "each webhook endpoint's signing secret is a Secrets Manager secret named by its endpoint id, created at "
    "run time; the wildcard is confined to this account's secrets under the sitedispatch-webhooks/ prefix"
)
RUNTIME = (
    "Python 3.13, not 3.14: the asset ships bytecode, which only an interpreter of the runtime's version can "
    "compile, and 3.13 is the newest on the machines that build it; without bytecode every cold start compiles "
    "each module from source (bench/coldstart.py)"
)
SCHEDULE_DLQ = (
    "this queue is itself the dead-letter queue of the EventBridge schedules (failed invocations land "
    "here); a DLQ of a DLQ would only move the problem"
)


def finding(rule: str, resource: str | None = None) -> str:
    return f"AwsSolutions::AwsSolutions-{rule}" + (f"[Resource::{resource}]" if resource else "")


def acknowledge(construct: IConstruct, rule: str, reason: str, resource: str | None = None) -> None:
    Validations.of(construct).acknowledge(Acknowledgment(id=finding(rule, resource), reason=reason))


def apply_nag(stack: SiteDispatchStack) -> None:
    Validations.of(stack).add_plugins(AwsSolutionsChecks(stack, verbose=True))
    bucket = f"<{stack.get_logical_id(_cfn(stack.storage.bucket))}.Arn>"
    for role, function in stack.functions.functions.items():
        assert function.role is not None
        acknowledge(_cfn(function), "L1", RUNTIME)
        # on the role, so that they hold for its inline policy and, past IAM's size limit, for the managed policy
        # CDK moves the rest into at synthesis
        acknowledge_role_policy(function.role, role, stack, bucket)
    api_nag(stack)
    reconciler = f"<{stack.get_logical_id(_cfn(stack.functions.functions['reconciler']))}.Arn>"
    for child in stack.node.children:
        if child.node.id.startswith("SchedulerRoleForTarget"):
            acknowledge(_cfn(child.node.find_child("DefaultPolicy")), "IAM5", VERSIONS, f"{reconciler}:*")
    acknowledge(_cfn(stack.schedules.dead_letter_queue), "SQS3", SCHEDULE_DLQ)


def acknowledge_role_policy(policy: IConstruct, role: str, stack: SiteDispatchStack, bucket: str) -> None:
    acknowledge(policy, "IAM5", XRAY, "*")
    for prefix in sorted(stack.functions.grants.object_prefixes.get(role, ())):
        acknowledge(policy, "IAM5", OBJECTS, f"{bucket}/{prefix}/*")
    secrets = "arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:"
    if role in operation_workers():
        acknowledge(policy, "IAM5", SECRETS, f"{secrets}{SECRET_NAME_PREFIX}*")
    if role in ("api", "webhooks"):
        acknowledge(policy, "IAM5", WEBHOOK_SECRETS, f"{secrets}{WEBHOOK_SECRET_PREFIX}*")


ROUTE_PARAMETERS = (
    "a route with a path parameter (an operation or site id) is one IAM resource with a wildcard for the "
    "parameter: which operations and sites the caller may touch is the core's decision (tenant confinement)"
)


def api_nag(stack: SiteDispatchStack) -> None:
    api = f"<{stack.get_logical_id(_cfn(stack.api.http_api))}>"
    readers = _cfn(stack.access.reader)
    for policy in (_cfn(stack.access.producer), _cfn(stack.access.operator), readers):
        for method, path in stack.api.routes:
            if "{" in path and (policy is not readers or method in READS):
                resource = "/".join("*" if part.startswith("{") else part for part in path.split("/"))
                acknowledge(
                    policy,
                    "IAM5",
                    ROUTE_PARAMETERS,
                    f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:{api}/$default/{method}{resource}",
                )


def _cfn(construct: IConstruct) -> CfnElement:
    child = construct.node.default_child
    assert isinstance(child, CfnElement)
    return child
