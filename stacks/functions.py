"""DispatchFunctions: the Lambda functions (workers, reconciler, API), their event source mappings and their
roles (each only what its code calls: stacks/grants.py).

Every function runs the same asset (bundled without Docker, `stacks/bundling.py`) on arm64 with a current Python
runtime, Powertools configured by environment, X-Ray active tracing and a log group with a retention.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from constructs import Construct

from sitedispatch.domain.resources import (
    FUNCTIONS,
    QUEUES,
    FunctionSpec,
)
from sitedispatch.observability import POWERTOOLS_ENVIRONMENT

from .bundling import ARCHITECTURE, RUNTIME, function_code
from .context import function_timeout_s, local_code
from .grants import FunctionGrants
from .queues import SiteQueues
from .storage import PublicationBucket
from .tables import DispatchTables

LOG_RETENTION = logs.RetentionDays.THREE_MONTHS
# Per queue; CDK context overrides. Events: one principal's batches go one at a time whatever the cap (its message
# group); the cap bounds how many principals' events are placed at once.
DEFAULT_MAX_CONCURRENCY = {"operations": 20, "bulk": 5, "publications": 20, "events": 5, "webhooks": 10}


def max_concurrency(scope: Construct, queue: str) -> int:
    """`cdk deploy -c maxConcurrency.operations=50`: the event source mapping's cap for one queue (2..1000)."""
    value = scope.node.try_get_context(f"maxConcurrency.{queue}")
    chosen = int(value) if value is not None else DEFAULT_MAX_CONCURRENCY[queue]
    if not 2 <= chosen <= 1000:
        raise ValueError(f"maxConcurrency.{queue} must be between 2 and 1000 (Lambda's limits), got {chosen}")
    return chosen


class DispatchFunctions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        environment: dict[str, str],
        queues: SiteQueues,
        tables: DispatchTables,
        storage: PublicationBucket,
        bus: events.IEventBus,
    ) -> None:
        super().__init__(scope, construct_id)
        self.queues, self.tables, self.storage, self.bus = queues, tables, storage, bus
        code = function_code(local=local_code(self))
        self.functions: dict[str, lambda_.Function] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        for role, spec in FUNCTIONS.items():
            self.functions[role] = self._function(role, spec, code, environment)
        for lane, queue_spec in QUEUES.items():
            self.functions[queue_spec.function].add_event_source(
                sources.SqsEventSource(
                    queues.queues[lane],
                    batch_size=FUNCTIONS[queue_spec.function].batch_size,
                    report_batch_item_failures=True,
                    max_concurrency=max_concurrency(self, lane),
                )
            )
        self.grants = FunctionGrants(self, self.functions, queues, tables, storage, bus)

    def _function(
        self, role: str, spec: FunctionSpec, code: lambda_.Code, environment: dict[str, str]
    ) -> lambda_.Function:
        log_group = logs.LogGroup(
            self, f"{spec.logical_id}Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.RETAIN
        )
        execution_role = iam.Role(
            self,
            f"{spec.logical_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"sitedispatch {role}: only the actions its code calls",
        )
        execution_role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
            )
        )
        function = lambda_.Function(
            self,
            spec.logical_id,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=code,
            handler=spec.handler,
            timeout=Duration.seconds(function_timeout_s(self, spec)),
            memory_size=spec.memory_mb,
            role=execution_role,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            environment={**environment, **POWERTOOLS_ENVIRONMENT},
            description=f"sitedispatch {role}",
        )
        self.log_groups[role] = log_group
        return function
