"""DispatchTables: operations, sites (leases, heads) and commits, keyed exactly as the pynamodb models say."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from sitedispatch.aws.tables import KeySpec, table_specs

ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


def _attribute(key: KeySpec | None) -> dynamodb.Attribute | None:
    return dynamodb.Attribute(name=key.name, type=ATTRIBUTE_TYPES[key.type]) if key else None


class DispatchTables(Construct):
    """On-demand, point-in-time recovery, encrypted, deletion-protected and retained when the stack goes."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.tables: dict[str, dynamodb.Table] = {}
        for role, spec in table_specs().items():
            table = dynamodb.Table(
                self,
                spec.logical_id,
                partition_key=_attribute(spec.partition),
                sort_key=_attribute(spec.sort),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                encryption=dynamodb.TableEncryption.AWS_MANAGED,
                deletion_protection=True,
                removal_policy=RemovalPolicy.RETAIN,
                time_to_live_attribute=spec.ttl_attribute,
            )
            for index in spec.indexes:
                table.add_global_secondary_index(
                    index_name=index.name,
                    partition_key=_attribute(index.partition),
                    sort_key=_attribute(index.sort),
                    projection_type=dynamodb.ProjectionType[index.projection],
                )
            self.tables[role] = table
