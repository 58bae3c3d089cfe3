"""AccessPolicies: the three managed policies users attach, exported with stable logical ids.

Each grants `execute-api:Invoke` on routes of the HTTP API and nothing on tables, queues or the bucket: only the
functions' roles touch the data plane, so every guarantee between tenants (admission, validation, idempotency,
confinement to one's own sites and operations, the audit) runs in the stack, whatever a caller sends.
- producers: every route but the operators' (quota overrides, sweeps); the core confines them to their own rows;
- operators: every route; the core recognises an operator by its IAM identity (the stack's `operators` context:
  ARN patterns, default roles named `sitedispatch-operator*` of this account);
- readers: every read (GET) route; the core recognises a reader by its IAM identity (the `readers` context, default
  roles named `sitedispatch-reader*`) and refuses, audited, anything but a read even if a broader policy allows it.
Each may read the stack's outputs (DescribeStacks), where the CLI finds the API's URL.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from .api import DispatchApi


class AccessPolicies(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, api: DispatchApi) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        find_stack = iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[stack.stack_id])
        self.producer = iam.ManagedPolicy(
            self,
            "ProducerPolicy",
            description="sitedispatch producer: its own sites and operations, through the API",
            statements=[
                iam.PolicyStatement(actions=["execute-api:Invoke"], resources=api.invoke_resources(operators=False)),
                find_stack,
            ],
        )
        self.operator = iam.ManagedPolicy(
            self,
            "OperatorPolicy",
            description="sitedispatch operator: every route of the API (status, dead letters, redrive, quotas, audit)",
            statements=[
                iam.PolicyStatement(actions=["execute-api:Invoke"], resources=api.invoke_resources(operators=True)),
                find_stack,
            ],
        )
        self.reader = iam.ManagedPolicy(
            self,
            "ReaderPolicy",
            description="sitedispatch reader: every read of the API (an operator's view, no action)",
            statements=[
                iam.PolicyStatement(
                    actions=["execute-api:Invoke"], resources=api.invoke_resources(operators=True, reads_only=True)
                ),
                find_stack,
            ],
        )
        for policy, logical_id in (
            (self.producer, "ProducerPolicy"),
            (self.operator, "OperatorPolicy"),
            (self.reader, "ReaderPolicy"),
        ):
            policy.node.default_child.override_logical_id(logical_id)  # type: ignore[union-attr]
