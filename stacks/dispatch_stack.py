"""SiteDispatchStack: the data plane composed from the capability constructs.

This release holds the queues, tables and bucket, and the function environment derived from them. The functions,
event source mappings, schedules, monitoring and access policies arrive with the infrastructure issue.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from sitedispatch.resources import BUCKET_FIELD, QUEUES, TABLE_FIELDS
from sitedispatch.settings import Settings

from .queues import SiteQueues
from .storage import PublicationBucket
from .tables import DispatchTables


class SiteDispatchStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.queues = SiteQueues(self, "Queues")
        self.tables = DispatchTables(self, "Tables")
        self.storage = PublicationBucket(self, "Storage")
        for name, value in self.function_environment().items():
            # One output per environment variable, so a deployed stack's outputs are a ready environment for the CLI.
            CfnOutput(self, name.replace("_", ""), value=value, description=name)

    def function_environment(self) -> dict[str, str]:
        """The Settings fields that locate resources, as the environment variables Settings reads."""
        values: dict[str, str] = {"region": self.region}
        for spec in QUEUES.values():
            values[spec.url_field] = self.queues.queues[spec.role].queue_url
            values[spec.dlq_url_field] = self.queues.dead_letter_queues[spec.role].queue_url
        for role, field in TABLE_FIELDS.items():
            values[field] = self.tables.tables[role].table_name
        values[BUCKET_FIELD] = self.storage.bucket.bucket_name
        return {Settings.env_name(field): value for field, value in values.items()}
