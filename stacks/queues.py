"""SiteQueues: the FIFO queues (grouped by site) and their FIFO dead-letter queues."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from sitedispatch.domain.resources import (
    FUNCTIONS,
    QUEUES,
    REDRIVE_BACKSTOP_RECEIVES,
    RETENTION_S,
    visibility_timeout_s,
)

from .context import function_timeout_s


class SiteQueues(Construct):
    """Each queue: high-throughput FIFO (dedup per message group), visibility 6 x its consumer's timeout,
    SQS-managed encryption, TLS only, and a FIFO DLQ as the redrive backstop (the worker dead-letters itself)."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        for role, spec in QUEUES.items():
            dlq = sqs.Queue(
                self,
                spec.dlq_logical_id,
                fifo=True,
                retention_period=Duration.seconds(RETENTION_S),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
            )
            queue = sqs.Queue(
                self,
                spec.logical_id,
                fifo=True,
                content_based_deduplication=False,
                deduplication_scope=sqs.DeduplicationScope.MESSAGE_GROUP,
                fifo_throughput_limit=sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
                visibility_timeout=Duration.seconds(
                    visibility_timeout_s(function_timeout_s(self, FUNCTIONS[spec.function]))
                ),
                retention_period=Duration.seconds(RETENTION_S),
                encryption=sqs.QueueEncryption.SQS_MANAGED,
                enforce_ssl=True,
                dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=REDRIVE_BACKSTOP_RECEIVES, queue=dlq),
            )
            self.queues[role] = queue
            self.dead_letter_queues[role] = dlq
