"""Each function's role: the calls its code makes, on the resources it makes them on, and nothing else.

Written from what the code calls and checked by running it: every local cloud is this template with each function
under its own role and IAM enforced, and `make test` writes the IAM report (sitedispatch/local/iam_report.py) of
every call the suite's functions made against these grants: a denied call fails the test that makes it, and a grant
no test called fails the report unless it says why (EXPLAINED there). So:
- item actions (GetItem, PutItem, ...) on tables, Query on the tables and indexes queried, by name: never an item
  action on an index ARN, which grants nothing;
- objects by the key prefixes the code writes and reads (`sites/`, `inputs/`, `uploads/`, `evidence/`,
  `checkpoints/`), with ListBucket where a missing key must read as missing (404), not as refused (403);
- a queue's consumer holds what its event source mapping polls with (CDK's SqsEventSource grants it: receive,
  delete, visibility, the queue's URL and attributes); the code's own visibility changes are among them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aws_cdk import Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from sitedispatch.domain.resources import (
    QUEUES,
    SECRET_NAME_PREFIX,
    WEBHOOK_SECRET_PREFIX,
    operation_lanes,
    operation_workers,
)

from .queues import SiteQueues
from .storage import PublicationBucket
from .tables import DispatchTables

READ = ["dynamodb:GetItem", "dynamodb:BatchGetItem"]
WRITE = ["dynamodb:PutItem", "dynamodb:UpdateItem"]
QUERY = ["dynamodb:Query"]
CONSUME = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"]
SEND = ["sqs:SendMessage"]
GET, PUT = ["s3:GetObject"], ["s3:PutObject"]


class FunctionGrants:
    """Adds each function's statements to its role."""

    def __init__(
        self,
        scope: Construct,
        functions: dict[str, lambda_.Function],
        queues: SiteQueues,
        tables: DispatchTables,
        storage: PublicationBucket,
        bus: events.IEventBus,
    ) -> None:
        self.stack = Stack.of(scope)
        self.functions, self.queues, self.tables, self.storage, self.bus = functions, queues, tables, storage, bus
        self.object_prefixes: dict[str, set[str]] = {}
        for role in operation_workers():
            self.operations_worker(role)
        self.publication_worker()
        self.events_worker()
        self.webhooks_worker()
        self.reconciler()
        self.api()

    # -- the resources, by name ----------------------------------------------------------------------------------

    def allow(self, role: str, actions: Sequence[str], resources: Iterable[str]) -> None:
        self.functions[role].add_to_role_policy(
            iam.PolicyStatement(actions=list(actions), resources=sorted(set(resources), key=str))
        )

    def table(self, *names: str) -> list[str]:
        return [self.tables.tables[name].table_arn for name in names]

    def index(self, table: str, *names: str) -> list[str]:
        return [f"{self.tables.tables[table].table_arn}/index/{name}" for name in names]

    def objects(self, role: str, *prefixes: str) -> list[str]:
        """Objects under each key prefix (recorded per role: cdk-nag's acknowledgments name each one)."""
        self.object_prefixes.setdefault(role, set()).update(prefixes)
        return [self.storage.bucket.arn_for_objects(f"{prefix}/*") for prefix in prefixes]

    def queue(self, *roles: str) -> list[str]:
        return [self.queues.queues[role].queue_arn for role in roles]

    def dead_letters(self, *roles: str) -> list[str]:
        return [self.queues.dead_letter_queues[role].queue_arn for role in roles]

    def secrets(self, prefix: str) -> list[str]:
        s = self.stack
        return [f"arn:{s.partition}:secretsmanager:{s.region}:{s.account}:secret:{prefix}*"]

    def missing_keys_read_as_missing(self, role: str) -> None:
        """ListBucket on the bucket: without it S3 answers a GET of a missing key 403, not 404 (the code reads a
        missing receipt, checkpoint or live.json as "not yet")."""
        self.allow(role, ["s3:ListBucket"], [self.storage.bucket.bucket_arn])

    # -- one function at a time ----------------------------------------------------------------------------------

    def operations_worker(self, role: str) -> None:
        """An operations worker: loads, leases, commits (the commit record, the head, the release, the operation and
        its event in one transaction; a commit found written already is read), supersedes by the site's index (the
        interactive lane's kinds), releases the work waiting for its share in its lane, dead-letters into its lane's
        DLQ with evidence, and enqueues the publication; an import (the bulk lane) reads its upload and its
        checkpoints; a WordPress site's credential (sitedispatch/)."""
        [lane] = [lane for lane in operation_lanes() if QUEUES[lane].function == role]
        imports = lane == "bulk"
        self.allow(role, ["dynamodb:GetItem"], self.table("operations", "sites", "publications", "counters", "commits"))
        self.allow(role, ["dynamodb:BatchGetItem"], self.table("operations", "sites", "counters"))
        self.allow(role, ["dynamodb:PutItem"], self.table("commits", "publications", "events"))
        self.allow(role, ["dynamodb:UpdateItem"], self.table("operations", "sites", "counters"))
        # an uncapped dependency's breaker flag, checked on one of its running shards in the claim
        self.allow(role, ["dynamodb:ConditionCheckItem"], self.table("counters"))
        self.allow(role, QUERY, self.index("operations", "by-waiting", *(() if imports else ("by-site",))))
        self.allow(role, GET, self.objects(role, "sites", "inputs", *(("uploads", "checkpoints") if imports else ())))
        self.allow(role, PUT, self.objects(role, "sites", "evidence", *(("checkpoints",) if imports else ())))
        self.missing_keys_read_as_missing(role)
        self.allow(role, SEND, [*self.queue(lane, "publications", "events"), *self.dead_letters(lane)])
        self.allow(role, ["secretsmanager:GetSecretValue"], self.secrets(SECRET_NAME_PREFIX))

    def publication_worker(self) -> None:
        """Renders route chunks into `sites/`, fans in, writes the receipt, promotes (the site's live pointer) and
        announces it; sends a publication's next steps."""
        role = "publications"
        self.allow(role, READ, self.table("sites", "publications"))
        self.allow(role, ["dynamodb:UpdateItem"], self.table("sites", "publications"))
        self.allow(role, ["dynamodb:PutItem"], self.table("events"))
        self.allow(role, GET + PUT, self.objects(role, "sites"))
        self.missing_keys_read_as_missing(role)
        self.allow(role, SEND, self.queue("publications", "events"))

    def events_worker(self) -> None:
        """Gives each event its place in its principal's feed, puts it on the bus, wakes the webhook endpoints that
        want it: nothing else."""
        role = "events"
        self.allow(role, ["dynamodb:BatchGetItem", "dynamodb:UpdateItem"], self.table("events"))
        self.allow(role, ["dynamodb:PutItem"], self.table("feed"))
        self.allow(role, QUERY, self.table("feed", "webhooks"))
        self.allow(role, ["events:PutEvents"], [self.bus.event_bus_arn])
        self.allow(role, SEND, self.queue("webhooks"))

    def webhooks_worker(self) -> None:
        """Reads an endpoint, its feed and its secret (sitedispatch-webhooks/), records each delivery, disables an
        endpoint that keeps failing (and announces it), wakes an endpoint again when a wake runs out of time."""
        role = "webhooks"
        self.allow(role, ["dynamodb:GetItem", "dynamodb:PutItem"], self.table("webhooks"))
        self.allow(role, WRITE, self.table("deliveries"))
        self.allow(role, ["dynamodb:PutItem"], self.table("events"))
        self.allow(role, QUERY, self.table("feed"))
        self.allow(role, ["secretsmanager:GetSecretValue"], self.secrets(WEBHOOK_SECRET_PREFIX))
        self.allow(role, SEND, self.queue("webhooks", "events"))

    def reconciler(self) -> None:
        """The sweeps (reconciler.py): what is in flight by status, a batch's unsent groups (sent, then its record
        deleted), the shares' waiting work, stale leases, open publications, live pointers (live.json rewritten),
        undelivered events, due webhook endpoints, drifted counters; due WordPress events (a wp_cron submitted as
        the site's owner); the lanes' dead letters."""
        role, lanes = "reconciler", operation_lanes()
        self.allow(role, ["dynamodb:GetItem"], self.table("operations", "sites"))
        self.allow(role, ["dynamodb:BatchGetItem"], self.table("sites", "counters", "events"))
        self.allow(role, ["dynamodb:UpdateItem"], self.table("operations", "sites", "counters"))
        self.allow(role, ["dynamodb:PutItem"], self.table("operations", "counters", "events"))
        self.allow(role, ["dynamodb:BatchWriteItem"], self.table("counters"))  # a batch's unsent-groups record
        self.allow(
            role,
            QUERY,
            [
                *self.index("operations", "by-status"),
                *self.index("sites", "by-due", "by-live"),
                *self.index("publications", "by-open"),
                *self.index("counters", "by-held"),
                *self.index("events", "by-undelivered"),
                *self.index("webhooks", "by-due"),
            ],
        )
        self.allow(role, GET + PUT, self.objects(role, "sites"))
        self.missing_keys_read_as_missing(role)
        self.allow(role, SEND, self.queue(*lanes, "publications", "events", "webhooks"))
        self.allow(role, CONSUME, self.dead_letters(*lanes))

    def api(self) -> None:
        """Submit (operation rows, admission counters, the input, the message), an operation's publication, the
        controls (cancel, pause, resume and the deliveries it wakes, redrive, replay: the DLQs a redrive empties;
        quotas set and cleared),
        registrations, webhooks (endpoints, their deliveries and signing secrets, sitedispatch-webhooks/: created,
        rotated, deleted), the audit log it alone writes, status (every queue's attributes), evidence, live content
        and feed reads, the presigned uploads it signs (PutObject on uploads/), and a sweep an operator asks for
        (what the reconciler does)."""
        role, lanes = "api", operation_lanes()
        self.allow(
            role, ["dynamodb:GetItem"], self.table("operations", "sites", "counters", "webhooks", "publications")
        )
        self.allow(role, ["dynamodb:BatchGetItem"], self.table("operations", "sites", "counters", "events"))
        self.allow(
            role, ["dynamodb:PutItem"], self.table("operations", "sites", "counters", "events", "audit", "webhooks")
        )
        self.allow(role, ["dynamodb:UpdateItem"], self.table("operations", "sites", "counters"))
        self.allow(role, ["dynamodb:ConditionCheckItem"], self.table("counters"))  # a share's guard at admission
        # a webhook endpoint removed with its deliveries, a batch's unsent-groups record, a quota cleared, an empty
        # site deleted with its admission counter
        self.allow(role, ["dynamodb:DeleteItem"], self.table("webhooks", "counters", "sites"))
        self.allow(role, ["dynamodb:BatchWriteItem"], self.table("deliveries", "counters"))
        self.allow(
            role,
            QUERY,
            [
                *self.table("audit", "feed", "deliveries", "publications", "webhooks"),
                *self.index("operations", "by-status", "by-site", "by-dead-class", "by-waiting"),
                *self.index("commits", "by-site"),
                *self.index("sites", "by-due", "by-live"),
                *self.index("publications", "by-open"),
                *self.index("counters", "by-held"),
                *self.index("events", "by-undelivered"),
                *self.index("webhooks", "by-due"),
            ],
        )
        self.allow(role, ["dynamodb:Scan"], self.table("operations", "sites"))  # an operator's listings of all
        self.allow(role, GET, self.objects(role, "sites", "uploads", "evidence"))
        # inputs; a sweep an operator asks for rewrites a live.json; the presigned uploads it signs
        self.allow(role, PUT, self.objects(role, "inputs", "sites", "uploads"))
        self.missing_keys_read_as_missing(role)
        self.allow(
            role,
            ["sqs:GetQueueAttributes"],
            [*self.queue(*QUEUES), *self.dead_letters(*QUEUES)],
        )
        # submit and redrive (the lanes), events, a webhook endpoint's wake; a sweep an operator asks for resumes a
        # publication
        self.allow(role, SEND, self.queue(*lanes, "publications", "events", "webhooks"))
        self.allow(role, CONSUME, self.dead_letters(*lanes))
        # a resume (a site's or a dependency's) makes the deliveries its pause held visible again, by their receipts
        self.allow(role, ["sqs:ChangeMessageVisibility"], self.queue(*lanes))
        self.allow(
            role,
            [
                "secretsmanager:CreateSecret",
                "secretsmanager:PutSecretValue",
                "secretsmanager:GetSecretValue",
                "secretsmanager:DeleteSecret",
            ],
            self.secrets(WEBHOOK_SECRET_PREFIX),
        )
