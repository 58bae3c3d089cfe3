"""SQS FIFO adapters: the operations queue (group = site id), its DLQ, and a received message's visibility."""

from __future__ import annotations

import math
from typing import Any

from ..model import PublicationMessage, QueueMessage

MAX_VISIBILITY_S = 43_200  # SQS's ceiling for ChangeMessageVisibility


class SqsOperationQueue:
    """The operations lanes: lane name -> (queue URL, dead-letter queue URL)."""

    def __init__(self, client: Any, lanes: dict[str, tuple[str, str]]) -> None:
        self.client = client
        self.lanes = lanes

    def send(self, message: QueueMessage, dedup_id: str, lane: str) -> str:
        response = self.client.send_message(
            QueueUrl=self.lanes[lane][0], MessageBody=message.to_body(),
            MessageGroupId=message.site_id, MessageDeduplicationId=dedup_id,
        )
        return str(response["MessageId"])

    def dead_letter(self, message: QueueMessage, dedup_id: str, attributes: dict[str, str], lane: str) -> str:
        response = self.client.send_message(
            QueueUrl=self.lanes[lane][1], MessageBody=message.to_body(), MessageGroupId=message.site_id,
            MessageDeduplicationId=f"{dedup_id}-dead-a{attributes.get('attempt', '0')}",
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items() if v},
        )
        return str(response["MessageId"])


class SqsPublicationQueue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def send(self, message: PublicationMessage) -> str:
        response = self.client.send_message(QueueUrl=self.queue_url, MessageBody=message.to_body(),
                                            MessageGroupId=message.group_id,
                                            MessageDeduplicationId=message.dedup_id)
        return str(response["MessageId"])


class SqsVisibility:
    """ChangeMessageVisibility for one received message."""

    def __init__(self, client: Any, queue_url: str, receipt_handle: str) -> None:
        self.client = client
        self.queue_url = queue_url
        self.receipt_handle = receipt_handle

    def change(self, seconds: float) -> None:
        self.client.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=self.receipt_handle,
            VisibilityTimeout=max(0, min(MAX_VISIBILITY_S, math.ceil(seconds))),
        )


def queue_arn_from_url(url: str, region: str) -> str:
    """arn:aws:sqs:REGION:ACCOUNT:NAME from https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (or a local endpoint)."""
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:aws:sqs:{region}:{account}:{name}"
