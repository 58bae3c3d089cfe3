"""PublicationBucket: inputs, uploads, content snapshots, routes, receipts and evidence; all immutable objects."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct

INPUT_RETENTION_DAYS = 90  # operation inputs: a redrive or replay needs them while the operation may come back
UPLOAD_RETENTION_DAYS = 30  # staged WXR files (large); an import older than this is not redriven with its file
EVIDENCE_RETENTION_DAYS = 400  # dead-letter evidence: over a year, for audits and incident reviews
EVIDENCE_INFREQUENT_DAYS = 30
NONCURRENT_RETENTION_DAYS = 30
ACCESS_LOG_RETENTION_DAYS = 90


class PublicationBucket(Construct):
    """Private, TLS only, encrypted, versioned, retained; inputs expire, overwritten versions do too."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(ACCESS_LOG_RETENTION_DAYS))
            ],
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="dispatch-bucket/",
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-inputs", prefix="inputs/", expiration=Duration.days(INPUT_RETENTION_DAYS)),
                s3.LifecycleRule(
                    id="expire-uploads", prefix="uploads/", expiration=Duration.days(UPLOAD_RETENTION_DAYS)
                ),
                s3.LifecycleRule(
                    id="evidence",
                    prefix="evidence/",
                    expiration=Duration.days(EVIDENCE_RETENTION_DAYS),
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=Duration.days(EVIDENCE_INFREQUENT_DAYS),
                        )
                    ],
                ),
                s3.LifecycleRule(
                    id="expire-noncurrent", noncurrent_version_expiration=Duration.days(NONCURRENT_RETENTION_DAYS)
                ),
            ],
        )
