"""DispatchFunctions: the Lambda functions (workers, reconciler, API), their event source mappings and their
least-privilege roles.

Every function runs the same asset (bundled without Docker, `stacks/bundling.py`) on arm64 with a current Python
runtime, Powertools configured by environment, X-Ray active tracing and a log group with a retention. Each role
holds only the actions its function's code calls, written out here rather than granted wholesale.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from constructs import Construct

from sitedispatch.aws.tables import table_specs
from sitedispatch.domain.resources import (
    FUNCTIONS,
    QUEUES,
    SECRET_NAME_PREFIX,
    WEBHOOK_SECRET_PREFIX,
    FunctionSpec,
    operation_lanes,
    operation_workers,
)
from sitedispatch.observability import POWERTOOLS_ENVIRONMENT

from .bundling import ARCHITECTURE, RUNTIME, function_code
from .context import function_timeout_s, local_code
from .queues import SiteQueues
from .storage import PublicationBucket
from .tables import DispatchTables

LOG_RETENTION = logs.RetentionDays.THREE_MONTHS
# Per queue; CDK context overrides. Events: one principal's batches go one at a time whatever the cap (its message
# group); the cap bounds how many principals' events are placed at once.
DEFAULT_MAX_CONCURRENCY = {"operations": 20, "bulk": 5, "publications": 20, "events": 5, "webhooks": 10}

# DynamoDB actions by need. TransactWriteItems is authorized per item by the item's own action.
READ = ["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"]
WRITE = ["dynamodb:PutItem", "dynamodb:UpdateItem"]
SCAN = ["dynamodb:Scan"]
CONSUME = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]


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
        for role in operation_workers():
            self._grant_operations_worker(role)
        self._grant_publication_worker()
        self._grant_events_worker()
        self._grant_webhooks_worker()
        self._grant_reconciler(operation_lanes())
        self._grant_api(operation_lanes())
        for role in (*operation_workers(), "publications", "reconciler", "api", "webhooks"):
            self._grant_event_writer(role)

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

    # -- permissions, one function at a time ----------------------------------------------------------------------

    def _allow(self, role: str, actions: Sequence[str], resources: Sequence[str]) -> None:
        self.functions[role].add_to_role_policy(iam.PolicyStatement(actions=list(actions), resources=list(resources)))

    def table_arns(self, *names: str) -> list[str]:
        """Each table and each of its indexes by name (Query on a GSI is authorized on `table/index/NAME`)."""
        specs = table_specs()
        arns: list[str] = []
        for name in names:
            table = self.tables.tables[name]
            arns += [table.table_arn, *(f"{table.table_arn}/index/{index.name}" for index in specs[name].indexes)]
        return arns

    def _allow_bucket(self, role: str, prefix: str) -> None:
        """Objects under `prefix`, and ListBucket so that a missing key reads as 404 (not 403) to the code."""
        bucket = self.storage.bucket
        self._allow(role, ["s3:GetObject", "s3:PutObject"], [bucket.arn_for_objects(prefix)])
        self._allow(role, ["s3:ListBucket"], [bucket.bucket_arn])

    def _grant_operations_worker(self, role: str) -> None:
        """One operations-worker function: it consumes only its own lanes, and dead-letters by the operation's kind
        (so into any operation lane's DLQ: a message that arrived on the wrong lane still goes dead where `dlq`
        looks for its kind)."""
        q = self.queues
        self._allow(
            role, [*READ, *WRITE], self.table_arns("operations", "sites", "commits", "publications", "counters")
        )
        self._allow_bucket(role, "*")
        own = [q.queues[lane].queue_arn for lane in operation_lanes() if QUEUES[lane].function == role]
        self._allow(role, CONSUME, own)
        # its own lanes too: an operation that ends releases the work waiting for its fairness share in its lane
        # (flow/shares.py `release`)
        self._allow(
            role,
            ["sqs:SendMessage"],
            [
                *own,
                *(q.dead_letter_queues[lane].queue_arn for lane in operation_lanes()),
                q.queues["publications"].queue_arn,
            ],
        )
        # WordPress sites' application passwords (the wordpress driver); the crawl of publication needs none
        stack = Stack.of(self)
        self._allow(
            role,
            ["secretsmanager:GetSecretValue"],
            [f"arn:{stack.partition}:secretsmanager:{stack.region}:{stack.account}:secret:{SECRET_NAME_PREFIX}*"],
        )

    def _grant_publication_worker(self) -> None:
        q = self.queues
        self._allow("publications", [*READ, *WRITE], self.table_arns("sites", "publications"))
        self._allow_bucket("publications", "sites/*")
        self._allow("publications", CONSUME, [q.queues["publications"].queue_arn])
        self._allow("publications", ["sqs:SendMessage"], [q.queues["publications"].queue_arn])

    def _grant_event_writer(self, role: str) -> None:
        """A function whose transitions write events (in their own transactions) and send their messages."""
        self._allow(role, WRITE, self.table_arns("events"))
        self._allow(role, ["sqs:SendMessage"], [self.queues.queues["events"].queue_arn])

    def _grant_events_worker(self) -> None:
        """Places events in their feeds and puts them on the bus: nothing else."""
        self._allow("events", [*READ, *WRITE], self.table_arns("events", "feed"))
        self._allow("events", CONSUME, [self.queues.queues["events"].queue_arn])
        self._allow("events", ["events:PutEvents"], [self.bus.event_bus_arn])

    def _webhook_secrets(self) -> str:
        stack = Stack.of(self)
        return f"arn:{stack.partition}:secretsmanager:{stack.region}:{stack.account}:secret:{WEBHOOK_SECRET_PREFIX}*"

    def _grant_webhooks_worker(self) -> None:
        """Reads its endpoints' feeds and secrets, writes endpoints and deliveries (and a disabling's event), wakes
        an endpoint again; the events worker wakes the endpoints that want what it placed."""
        webhooks = self.queues.queues["webhooks"].queue_arn
        self._allow("webhooks", [*READ, *WRITE], self.table_arns("webhooks", "deliveries"))
        self._allow("webhooks", READ, self.table_arns("feed"))
        self._allow("webhooks", ["secretsmanager:GetSecretValue"], [self._webhook_secrets()])
        self._allow("webhooks", CONSUME, [webhooks])
        self._allow("webhooks", ["sqs:SendMessage"], [webhooks])
        self._allow("events", READ, self.table_arns("webhooks"))
        self._allow("events", ["sqs:SendMessage"], [webhooks])

    def _grant_reconciler(self, lanes: list[str]) -> None:
        q = self.queues
        self._allow("reconciler", READ, self.table_arns("events"))  # the undelivered events it sends again
        # webhook endpoints whose wake was lost (a scan of the endpoints, each principal's last feed place)
        self._allow("reconciler", [*READ, *SCAN], self.table_arns("webhooks"))
        self._allow("reconciler", READ, self.table_arns("feed"))
        self._allow("reconciler", ["sqs:SendMessage"], [q.queues["webhooks"].queue_arn])
        self._allow(
            "reconciler", [*READ, *WRITE, *SCAN], self.table_arns("operations", "sites", "publications", "counters")
        )
        self._allow_bucket("reconciler", "*")
        self._allow(
            "reconciler",
            ["sqs:SendMessage"],
            [*(q.queues[lane].queue_arn for lane in lanes), q.queues["publications"].queue_arn],
        )
        self._allow("reconciler", CONSUME, [q.dead_letter_queues[lane].queue_arn for lane in lanes])
        # a batch submit's record of the groups it has not sent yet, deleted once they are (aws/operations.py `sent`)
        self._allow("reconciler", ["dynamodb:BatchWriteItem"], [self.tables.tables["counters"].table_arn])

    def _grant_api(self, lanes: list[str]) -> None:
        """The API runs submit (operation rows, admission counters, the input and the message), the controls (every
        table but commits' writes, the audit log it alone writes, the DLQs a redrive empties), status (every
        queue's attributes), evidence and live reads, the presigned uploads it signs (so PutObject on uploads/), and
        a sweep an operator asks for (what the reconciler may do)."""
        q = self.queues
        self._allow("api", [*READ, *WRITE, *SCAN], self.table_arns(*self.tables.tables))
        self._allow_bucket("api", "*")
        self._allow(
            "api",
            ["sqs:SendMessage", "sqs:GetQueueAttributes"],
            [
                *(queue.queue_arn for queue in q.queues.values()),
                *(queue.queue_arn for queue in q.dead_letter_queues.values()),
            ],
        )
        self._allow("api", CONSUME, [q.dead_letter_queues[lane].queue_arn for lane in lanes])
        # a deleted webhook endpoint's row and its deliveries' rows, a batch's unsent-groups record once its groups
        # are sent, a quota cleared (aws/flow.py `clear`): the only deletes of any function
        self._allow(
            "api",
            ["dynamodb:DeleteItem", "dynamodb:BatchWriteItem"],
            [self.tables.tables[name].table_arn for name in ("webhooks", "deliveries", "counters")],
        )
        # webhook endpoints' signing secrets: created, rotated, deleted and read (for a rotation) by the API only
        self._allow(
            "api",
            [
                "secretsmanager:CreateSecret",
                "secretsmanager:PutSecretValue",
                "secretsmanager:GetSecretValue",
                "secretsmanager:DeleteSecret",
            ],
            [self._webhook_secrets()],
        )
