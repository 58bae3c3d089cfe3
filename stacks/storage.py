"""PublicationBucket: inputs, content snapshots and (later) routes, receipts and evidence; all immutable objects."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

INPUT_RETENTION_DAYS = 90
NONCURRENT_RETENTION_DAYS = 30


class PublicationBucket(Construct):
    """Private, TLS only, encrypted, versioned, retained; inputs expire, overwritten versions do too."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket(
            self, "Bucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-inputs", prefix="inputs/",
                                 expiration=Duration.days(INPUT_RETENTION_DAYS)),
                s3.LifecycleRule(id="expire-noncurrent",
                                 noncurrent_version_expiration=Duration.days(NONCURRENT_RETENTION_DAYS)),
            ],
        )
