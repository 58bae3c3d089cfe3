"""SiteDispatchStack: one construct per capability, composed (STYLE.md).

Queues (FIFO + FIFO DLQs), tables, the bucket, the event bus; the functions with their event source mappings and
roles; the reconciler's schedules; the dashboard and alarms; the producer and operator policies; cdk-nag's
AwsSolutions checks, with every suppression and its reason in `stacks/nag.py`; the HTTP API in front of it all.
Outputs: the API's URL (where the CLI finds it, `--stack NAME`), the policy ARNs, the dashboard and the event bus.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_events as events
from constructs import Construct

from sitedispatch.domain.resources import (
    API_URL_VARIABLE,
    BUCKET_FIELD,
    EVENT_BUS_FIELD,
    EVENT_BUS_LOGICAL_ID,
    QUEUES,
    TABLE_FIELDS,
)
from sitedispatch.domain.settings import Settings

from .access import AccessPolicies
from .api import DispatchApi
from .checkov import acknowledge_checkov
from .functions import DispatchFunctions
from .monitoring import DispatchMonitoring
from .nag import apply_nag
from .queues import SiteQueues
from .schedules import ReconcilerSchedules
from .storage import PublicationBucket
from .tables import DispatchTables


class SiteDispatchStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Feature flags this stack relies on, set here so `python app.py`, the CDK CLI and tests agree: the access-log
        # bucket admits S3's log delivery by bucket policy (ACLs stay disabled).
        self.node.set_context("@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy", True)
        # and each role's statements merged where they share actions or resources, so that the api function's
        # role (the most calls, each on its own tables, indexes and prefixes) stays one inline policy
        self.node.set_context("@aws-cdk/aws-iam:minimizePolicies", True)
        self.queues = SiteQueues(self, "Queues")
        self.tables = DispatchTables(self, "Tables")
        self.storage = PublicationBucket(self, "Storage")
        # Every event (source sitedispatch, detail-type its type): consumers subscribe with rules of their own.
        # Named after the stack when it is deployed (a bus needs a name): two stacks of this app in one account
        # never share a bus, and the local cloud deploys one stack per test into one emulated account.
        self.bus = events.EventBus(
            self,
            EVENT_BUS_LOGICAL_ID,
            event_bus_name=f"{Aws.STACK_NAME}-events",
            description="sitedispatch events: events.schema.json",
        )
        environment = self.function_environment()
        self.functions = DispatchFunctions(
            self,
            "Functions",
            environment=environment,
            queues=self.queues,
            tables=self.tables,
            storage=self.storage,
            bus=self.bus,
        )
        self.schedules = ReconcilerSchedules(self, "Schedules", functions=dict(self.functions.functions))
        self.monitoring = DispatchMonitoring(
            self,
            "Monitoring",
            queues=self.queues.queues,
            dead_letter_queues=self.queues.dead_letter_queues,
            functions=self.functions.functions,
        )
        self.api = DispatchApi(self, "Api", function=self.functions.functions["api"])
        self.access = AccessPolicies(self, "Access", api=self.api)
        # The one thing a client needs: its description names the variable the CLI reads (`--stack NAME`).
        CfnOutput(self, "ApiUrl", value=self.api.url, description=API_URL_VARIABLE)
        CfnOutput(
            self,
            "ProducerPolicyArn",
            value=self.access.producer.managed_policy_arn,
            description="attach to producers: their own sites and operations, through the API",
        )
        CfnOutput(
            self,
            "OperatorPolicyArn",
            value=self.access.operator.managed_policy_arn,
            description="attach to operators: every route of the API",
        )
        CfnOutput(
            self,
            "ReaderPolicyArn",
            value=self.access.reader.managed_policy_arn,
            description="attach to readers: every read of the API, no action (the console's read-only operators)",
        )
        CfnOutput(self, "DashboardName", value=self.monitoring.dashboard.dashboard_name)
        CfnOutput(self, "EventBusName", value=self.bus.event_bus_name, description="rules on it receive every event")
        apply_nag(self)
        acknowledge_checkov(self, self.storage.access_logs)

    def function_environment(self) -> dict[str, str]:
        """The Settings fields that locate resources, as the environment variables Settings reads."""
        values: dict[str, str] = {"region": self.region}
        for spec in QUEUES.values():
            values[spec.url_field] = self.queues.queues[spec.role].queue_url
            values[spec.dlq_url_field] = self.queues.dead_letter_queues[spec.role].queue_url
        for role, field in TABLE_FIELDS.items():
            values[field] = self.tables.tables[role].table_name
        values[BUCKET_FIELD] = self.storage.bucket.bucket_name
        values[EVENT_BUS_FIELD] = self.bus.event_bus_name
        values["operators"] = self.node.try_get_context("operators") or (
            f"arn:{self.partition}:sts::{self.account}:assumed-role/sitedispatch-operator*"
        )
        values["readers"] = self.node.try_get_context("readers") or (
            f"arn:{self.partition}:sts::{self.account}:assumed-role/sitedispatch-reader*"
        )
        return {Settings.env_name(field): value for field, value in values.items()}
