"""The one factory that turns Settings into wired ports. Clients are built here, lazily, never at import."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from sitedispatch.domain.settings import Settings

if TYPE_CHECKING:  # the adapters and cores are imported where they are built, so a cold start pays only for its own
    from sitedispatch.aws.events import EventOutbox
    from sitedispatch.aws.tables import Models
    from sitedispatch.domain.ports import (
        AuditLog,
        BlobStore,
        CommitStore,
        DependencyStore,
        EventBus,
        EventLog,
        EventQueue,
        OperationQueue,
        OperationStore,
        PublicationQueue,
        PublicationStore,
        QuotaStore,
        SiteStore,
        UploadSigner,
        WebhookQueue,
        WebhookSecrets,
        WebhookStore,
    )
    from sitedispatch.events.worker import EventsWorker
    from sitedispatch.flow.minute_counts import MinuteCounts
    from sitedispatch.flow.outcomes import Outcomes
    from sitedispatch.flow.pace import Pace
    from sitedispatch.flow.retry_budget import RetryBudget
    from sitedispatch.flow.shares import SiteLabels
    from sitedispatch.kinds.contract import SiteDriver
    from sitedispatch.operations.submission import Submitter
    from sitedispatch.operations.worker import OperationsWorker
    from sitedispatch.operator.controls import Controls
    from sitedispatch.publication.worker import PublicationWorker
    from sitedispatch.reconciler import Reconciler
    from sitedispatch.webhooks.deliverer import WebhookDeliverer
    from sitedispatch.webhooks.endpoints import Endpoints


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


WARM_UP_KEY = "_warm-up"  # read once at init: no site has this id (SITE_ID_PATTERN has no "_")


@dataclass
class Dependencies:
    settings: Settings
    clock: SystemClock = field(default_factory=SystemClock)
    # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN of the role to act as (a test running a function
    # in-process under its deployed role); None: whatever the environment gives, as on Lambda
    credentials: Mapping[str, str] | None = None

    @cached_property
    def botocore_session(self) -> Any:
        """One botocore session for every client of the process, pynamodb's included (models)."""
        import botocore.session

        session = botocore.session.get_session()
        if self.credentials is not None:
            session.set_credentials(
                self.credentials["AWS_ACCESS_KEY_ID"],
                self.credentials["AWS_SECRET_ACCESS_KEY"],
                self.credentials.get("AWS_SESSION_TOKEN"),
            )
        return session

    @cached_property
    def session(self) -> Any:
        import boto3

        return boto3.session.Session(botocore_session=self.botocore_session, region_name=self.settings.region)

    @cached_property
    def sqs(self) -> Any:
        return self.session.client("sqs")

    @cached_property
    def s3(self) -> Any:
        return self.session.client("s3")

    @cached_property
    def models(self) -> Models:
        from sitedispatch.aws.tables import TableNames, build_models

        s = self.settings
        return build_models(
            TableNames(
                s.operations_table,
                s.sites_table,
                s.commits_table,
                s.publications_table,
                s.counters_table,
                s.audit_table,
                s.events_table,
                s.feed_table,
                s.webhooks_table,
                s.deliveries_table,
            ),
            s.region,
            session=self.botocore_session,
        )

    @cached_property
    def outbox(self) -> EventOutbox:
        """Writes each transition's event with it, then sends its message (on the events queue)."""
        from sitedispatch.aws.events import EventOutbox

        return EventOutbox(self.models, self.event_queue.send)

    @cached_property
    def event_queue(self) -> EventQueue:
        from sitedispatch.aws.events import SqsEventQueue

        return SqsEventQueue(self.sqs, self.settings.events_queue_url)

    @cached_property
    def events(self) -> EventLog:
        from sitedispatch.aws.events import DynamoEventLog

        return DynamoEventLog(self.models)

    @cached_property
    def event_bus(self) -> EventBus:
        from sitedispatch.aws.events import EventBridgeBus

        return EventBridgeBus(self.session.client("events"), self.settings.event_bus)

    @cached_property
    def dependency_store(self) -> DependencyStore:
        from sitedispatch.aws.dependencies import DynamoDependencyStore

        return DynamoDependencyStore(self.models.Counter, self.outbox)

    @cached_property
    def operations(self) -> OperationStore:
        from sitedispatch.aws.operations import DynamoOperationStore

        return DynamoOperationStore(self.models, self.outbox)

    @cached_property
    def sites(self) -> SiteStore:
        from sitedispatch.aws.sites import DynamoSiteStore

        return DynamoSiteStore(self.models, self.outbox)

    @cached_property
    def commits(self) -> CommitStore:
        from sitedispatch.aws.commits import DynamoCommitStore

        return DynamoCommitStore(self.models, self.outbox)

    @cached_property
    def publications(self) -> PublicationStore:
        from sitedispatch.aws.publications import DynamoPublicationStore

        return DynamoPublicationStore(self.models, self.outbox)

    @cached_property
    def minute_counts(self) -> MinuteCounts:
        from sitedispatch.aws.flow import DynamoMinuteBuckets
        from sitedispatch.flow.minute_counts import MinuteCounts

        return MinuteCounts(DynamoMinuteBuckets(self.models))

    @cached_property
    def retry_budget(self) -> RetryBudget:
        from sitedispatch.flow.retry_budget import RetryBudget

        return RetryBudget(self.minute_counts, self.settings.retry_budget_ratio, self.settings.retry_budget_min_retries)

    @cached_property
    def outcomes(self) -> Outcomes:
        from sitedispatch.flow.outcomes import Outcomes

        return Outcomes(self.minute_counts)

    @cached_property
    def site_labels(self) -> SiteLabels:
        from sitedispatch.flow.shares import SiteLabels

        return SiteLabels()  # one per process (a Lambda environment): what its submits learned

    @cached_property
    def pace(self) -> Pace:
        from sitedispatch.flow.minute_counts import MinuteCounts
        from sitedispatch.flow.pace import Pace

        # a principal's own bucket (hot only past ~500 completions a second of one principal): one shard
        return Pace(MinuteCounts(self.minute_counts.buckets, shards=1))

    @cached_property
    def quotas(self) -> QuotaStore:
        from sitedispatch.aws.flow import DynamoQuotaStore

        return DynamoQuotaStore(self.models)

    @cached_property
    def audit(self) -> AuditLog:
        from sitedispatch.aws.audit import DynamoAuditLog

        return DynamoAuditLog(self.models)

    @cached_property
    def publication_queue(self) -> PublicationQueue:
        from sitedispatch.aws.sqs import SqsPublicationQueue

        return SqsPublicationQueue(self.sqs, self.settings.publications_queue_url)

    @cached_property
    def blobs(self) -> BlobStore:
        from sitedispatch.aws.s3 import S3BlobStore

        return S3BlobStore(lambda: self.s3, self.settings.bucket)

    @cached_property
    def queue(self) -> OperationQueue:
        from sitedispatch.aws.sqs import SqsOperationQueue
        from sitedispatch.domain.resources import QUEUES, operation_lanes

        return SqsOperationQueue(
            self.sqs,
            {
                lane: (
                    getattr(self.settings, QUEUES[lane].url_field),
                    getattr(self.settings, QUEUES[lane].dlq_url_field),
                )
                for lane in operation_lanes()
            },
        )

    def queue_url_for_arn(self, arn: str) -> str:
        """The URL of the queue an event record came from (its eventSourceARN ends with the queue name)."""
        from sitedispatch.domain.resources import QUEUES

        name = arn.rsplit(":", 1)[-1]
        for spec in QUEUES.values():
            url = getattr(self.settings, spec.url_field)
            if url.rstrip("/").rsplit("/", 1)[-1] == name:
                return str(url)
        raise KeyError(f"no queue named {name}")

    @cached_property
    def drivers(self) -> Mapping[str, SiteDriver]:
        """Every site driver this deployment has (a site names its own)."""
        from sitedispatch.domain.model import REFERENCE_DRIVER, WORDPRESS_DRIVER
        from sitedispatch.kinds.registry import DriverRegistry

        def reference() -> SiteDriver:
            from sitedispatch.drivers.reference.driver import ReferenceDriver

            return ReferenceDriver()

        def wordpress() -> SiteDriver:
            from sitedispatch.drivers.wordpress.credentials import Credentials
            from sitedispatch.drivers.wordpress.driver import WordPressDriver

            def secret_string(secret_id: str) -> str:  # the client is built on the first secret read, not before
                from sitedispatch.aws.secrets import secret_reader

                return str(secret_reader(self.session.client("secretsmanager"))(secret_id))

            return WordPressDriver(Credentials(secret_string))

        return DriverRegistry({REFERENCE_DRIVER: reference, WORDPRESS_DRIVER: wordpress})

    def clients(self) -> Dependencies:
        """Build the DynamoDB (every table's), SQS and S3 clients now, without a request (so a process may fork
        after it: no connection is open yet). What a function's init phase does (functions/runtime.py)."""
        _ = self.models.Operation._get_connection().connection.client  # one client serves every table
        _ = (self.sqs, self.s3)
        return self

    def warm(self) -> Dependencies:
        """The clients, and one read through the table client, so a long-lived process's first request pays
        nothing more: the CLI, the demo, tests and benchmarks driving the runtime. Not a function's (a read in the
        init phase would open a connection before the local runtime forks its environments)."""
        self.clients()
        _ = (
            self.operations,
            self.sites,
            self.commits,
            self.blobs,
            self.queue,
            self.publications,
            self.publication_queue,
        )
        # botocore builds an operation's model and serializer on its first call. The sites table, because every
        # role may read it; a key that names nothing costs one read unit. Best effort: a warm-up that fails leaves
        # the first request to pay instead.
        try:
            self.sites.get(WARM_UP_KEY)
        except Exception as exc:
            logging.getLogger(__name__).warning("warm-up read failed: %s", exc)
        return self

    def submitter(self) -> Submitter:
        from sitedispatch import cores

        return cores.submitter(self)

    @cached_property
    def upload_signer(self) -> UploadSigner:
        """Presigned uploads (SigV4: the checksum headers are signed) with this process's credentials; one client
        per container, not one per upload request."""
        from botocore.config import Config

        from sitedispatch.aws.s3 import S3UploadSigner

        client = self.session.client("s3", config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        return S3UploadSigner(client, self.settings.bucket)

    def controls(self) -> Controls:
        from sitedispatch import cores

        return cores.controls(self)

    def reconciler(self) -> Reconciler:
        from sitedispatch import cores

        return cores.reconciler(self, self.submitter())

    def worker(self) -> OperationsWorker:
        from sitedispatch import cores

        return cores.worker(self, random.Random())

    def events_worker(self) -> EventsWorker:
        from sitedispatch import cores

        return cores.events_worker(self)

    @cached_property
    def webhooks(self) -> WebhookStore:
        from sitedispatch.aws.webhooks import DynamoWebhookStore

        return DynamoWebhookStore(self.models, self.outbox)

    @cached_property
    def webhook_secrets(self) -> WebhookSecrets:
        from sitedispatch.aws.webhooks import SecretsManagerWebhookSecrets

        return SecretsManagerWebhookSecrets(self.session.client("secretsmanager"))

    @cached_property
    def webhook_queue(self) -> WebhookQueue:
        from sitedispatch.aws.webhooks import SqsWebhookQueue

        return SqsWebhookQueue(self.sqs, self.settings.webhooks_queue_url)

    def webhook_deliverer(self) -> WebhookDeliverer:
        from sitedispatch import cores
        from sitedispatch.domain.webhooks import RetryPolicy
        from sitedispatch.webhooks.attempt import HttpSender

        sender = HttpSender(allow_loopback=self.settings.webhooks_allow_loopback)
        return cores.deliverer(self, sender, RetryPolicy.scaled(self.settings.webhook_retry_scale), random.Random())

    def endpoints(self) -> Endpoints:
        from sitedispatch.webhooks.endpoints import Endpoints, EndpointsDeps

        return Endpoints(
            EndpointsDeps(
                self.webhooks,
                self.webhook_secrets,
                self.events,
                self.webhook_queue,
                self.audit,
                self.clock,
                self.settings.webhooks_allow_loopback,
            )
        )

    def publication_worker(self) -> PublicationWorker:
        from sitedispatch import cores

        return cores.publisher(self, random.Random())
