"""AccessPolicies: the two managed policies users attach — producers (submit, follow their operations, cancel them)
and operators (every CLI action) — exported with stable logical ids.

IAM decides who may call what; the core then confines a principal to its own sites (Forbidden, exit 4) and audits
every action. IAM cannot confine a producer to its own rows here (operation ids are hashes, not principal-prefixed
keys), so the row-level rule is the core's, and a producer holding these credentials could read other tenants' rows
with raw API calls: give producers their own deployment, or front submit with an API that signs as the producer.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from sitedispatch.domain.resources import operation_lanes
from sitedispatch.operations.admission import GLOBAL, principal_counter, running_counter, site_counter

from .functions import CONSUME, READ, SCAN, WRITE, DispatchFunctions

PRODUCER_TABLES = ("operations", "sites", "audit")
# Producers move admission counters (submit, cancel) but never write an operator's quota override (`quota#…`) or
# the workers' statistics: their writes to the counters table are confined to these keys.
PRODUCER_COUNTER_KEYS = [GLOBAL, principal_counter("*"), site_counter("*"), running_counter("*", "*")]


class AccessPolicies(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, functions: DispatchFunctions) -> None:
        super().__init__(scope, construct_id)
        q, bucket = functions.queues, functions.storage.bucket
        stack = Stack.of(self)
        whoami = iam.PolicyStatement(actions=["sts:GetCallerIdentity"], resources=["*"])
        find_stack = iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[stack.stack_id])

        self.producer = iam.ManagedPolicy(
            self,
            "ProducerPolicy",
            description=("sitedispatch producer: submit operations, follow and cancel them, read published routes"),
            statements=[
                iam.PolicyStatement(actions=[*READ, *WRITE], resources=functions.table_arns(*PRODUCER_TABLES)),
                iam.PolicyStatement(actions=READ, resources=functions.table_arns("counters")),
                iam.PolicyStatement(
                    actions=WRITE,
                    resources=functions.table_arns("counters"),
                    conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": PRODUCER_COUNTER_KEYS}},
                ),
                iam.PolicyStatement(
                    actions=["s3:PutObject"],
                    resources=[bucket.arn_for_objects("inputs/*"), bucket.arn_for_objects("uploads/*")],
                ),
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[bucket.arn_for_objects("sites/*")]),
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn]),
                iam.PolicyStatement(
                    actions=["sqs:SendMessage", "sqs:GetQueueAttributes"],
                    resources=[q.queues[lane].queue_arn for lane in operation_lanes()],
                ),
                whoami,
                find_stack,
            ],
        )
        self.operator = iam.ManagedPolicy(
            self,
            "OperatorPolicy",
            description=(
                "sitedispatch operator: every CLI action (status, dead letters, redrive, replay, pause, audit)"
            ),
            statements=[
                iam.PolicyStatement(
                    actions=[*READ, *WRITE, *SCAN], resources=functions.table_arns(*functions.tables.tables)
                ),
                iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[bucket.arn_for_objects("*")]),
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn]),
                iam.PolicyStatement(
                    actions=["sqs:SendMessage", *CONSUME],
                    resources=[
                        *(queue.queue_arn for queue in q.queues.values()),
                        *(queue.queue_arn for queue in q.dead_letter_queues.values()),
                    ],
                ),
                whoami,
                find_stack,
            ],
        )
        for policy, logical_id in ((self.producer, "ProducerPolicy"), (self.operator, "OperatorPolicy")):
            policy.node.default_child.override_logical_id(logical_id)  # type: ignore[union-attr]
