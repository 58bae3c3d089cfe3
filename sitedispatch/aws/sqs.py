"""SQS FIFO adapters: the operations queue (group = site id), its DLQ, and a received message's visibility."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from sitedispatch import observability as obs
from sitedispatch.domain.model import PublicationMessage, QueueMessage
from sitedispatch.domain.ports import DeadLetter

# SQS's ceiling: a received message's visibility may reach at most 12 hours past its receive, in total; a request
# past it is refused, not shortened (API_ChangeMessageVisibility). The receive came a little before this delivery's
# first look at it (Lambda polls, then invokes), so the margin.
MAX_VISIBILITY_S = 43_200
RECEIVE_MARGIN_S = 60
SEND_BATCH = 10  # SendMessageBatch's most entries
SWEEP_HOLD_S = 60  # how long a DLQ sweep holds the messages it looks at (released at its end)


class SqsOperationQueue:
    """The operations lanes: lane name -> (queue URL, dead-letter queue URL)."""

    def __init__(self, client: Any, lanes: dict[str, tuple[str, str]]) -> None:
        self.client = client
        self.lanes = lanes

    def send(self, message: QueueMessage, dedup_id: str, lane: str) -> str:
        response = self.client.send_message(
            QueueUrl=self.lanes[lane][0],
            MessageBody=message.to_body(),
            MessageGroupId=message.site_id,
            MessageDeduplicationId=dedup_id,
        )
        return str(response["MessageId"])

    def send_many(self, messages: Sequence[tuple[QueueMessage, str]], lane: str) -> None:
        for start in range(0, len(messages), SEND_BATCH):
            batch = messages[start : start + SEND_BATCH]
            response = self.client.send_message_batch(
                QueueUrl=self.lanes[lane][0],
                Entries=[
                    {
                        "Id": str(n),
                        "MessageBody": message.to_body(),
                        "MessageGroupId": message.site_id,
                        "MessageDeduplicationId": dedup_id,
                    }
                    for n, (message, dedup_id) in enumerate(batch)
                ],
            )
            for failed in sorted(response.get("Failed", []), key=lambda f: int(f["Id"])):
                message, dedup_id = batch[int(failed["Id"])]
                self.send(message, dedup_id, lane)  # one entry refused (throttled, say): alone, or raise

    def wake(self, lane: str, receipts: Sequence[str]) -> int:
        woken = 0
        for start in range(0, len(receipts), SEND_BATCH):
            batch = receipts[start : start + SEND_BATCH]
            response = self.client.change_message_visibility_batch(
                QueueUrl=self.lanes[lane][0],
                Entries=[{"Id": str(n), "ReceiptHandle": r, "VisibilityTimeout": 0} for n, r in enumerate(batch)],
            )
            woken += len(response.get("Successful", []))  # a receipt received again since, or deleted, fails alone
        return woken

    def dead_letter(self, message: QueueMessage, dedup_id: str, attributes: dict[str, str], lane: str) -> str:
        response = self.client.send_message(
            QueueUrl=self.lanes[lane][1],
            MessageBody=message.to_body(),
            MessageGroupId=message.site_id,
            MessageDeduplicationId=f"{dedup_id}-dead-a{attributes.get('attempt', '0')}",
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items() if v},
        )
        return str(response["MessageId"])

    def sweep_dead_letters(
        self, lane: str, remove: Callable[[DeadLetter], bool], max_messages: int = 1000
    ) -> tuple[list[DeadLetter], list[DeadLetter]]:
        """Receive the DLQ's messages (holding each for SWEEP_HOLD_S), delete the selected ones, and make the rest
        visible again at the end. A FIFO queue hands out one message per group at a time, so a kept message hides
        the ones behind it in its group until the next sweep (queue-repair runs them again)."""
        url = self.lanes[lane][1]
        removed: list[DeadLetter] = []
        kept: list[tuple[DeadLetter, str]] = []
        try:
            while len(removed) + len(kept) < max_messages:
                response = self.client.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(10, max_messages - len(removed) - len(kept)),
                    VisibilityTimeout=SWEEP_HOLD_S,
                    WaitTimeSeconds=0,
                    MessageAttributeNames=["All"],
                    AttributeNames=["SentTimestamp"],
                )
                messages = response.get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    letter = DeadLetter(
                        lane,
                        {k: v.get("StringValue", "") for k, v in message.get("MessageAttributes", {}).items()},
                        int(message["Attributes"]["SentTimestamp"]) / 1000
                        if "SentTimestamp" in message.get("Attributes", {})
                        else None,
                    )
                    if remove(letter):
                        self.client.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                        removed.append(letter)
                    else:
                        kept.append((letter, message["ReceiptHandle"]))
        finally:
            for start in range(0, len(kept), 10):
                self.client.change_message_visibility_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                        for n, (_, handle) in enumerate(kept[start : start + 10])
                    ],
                )
        return removed, [letter for letter, _ in kept]


class SqsPublicationQueue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def send(self, message: PublicationMessage) -> str:
        response = self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=message.to_body(),
            MessageGroupId=message.group_id,
            MessageDeduplicationId=message.dedup_id,
        )
        return str(response["MessageId"])


# What SQS answers when this delivery's receipt handle no longer names an in-flight message: the message was
# received again by another consumer (its visibility ran out while this one was stopped) or deleted by it.
NOT_OURS_ANY_MORE = {"ReceiptHandleIsInvalid", "MessageNotInflight"}


class SqsVisibility:
    """ChangeMessageVisibility for one received message, built when its delivery begins."""

    def __init__(
        self, client: Any, queue_url: str, receipt_handle: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self.queue_url = queue_url
        self.receipt_handle = self.receipt = receipt_handle
        self.clock = clock
        self.received_at = clock() - RECEIVE_MARGIN_S

    def ceiling_s(self) -> int:
        """The longest visibility SQS still accepts for this receive (from now)."""
        return max(0, math.floor(MAX_VISIBILITY_S - (self.clock() - self.received_at)))

    def change(self, seconds: float) -> None:
        """A message that is no longer this delivery's is left to whoever has it (the lease, not the visibility,
        decides who may write): logged, not raised, so the outcome this delivery reached is still reported."""
        try:
            self.client.change_message_visibility(
                QueueUrl=self.queue_url,
                ReceiptHandle=self.receipt_handle,
                VisibilityTimeout=max(0, min(self.ceiling_s(), math.ceil(seconds))),
            )
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code, text = error.get("Code", ""), error.get("Message", "")
            # AWS also says it as InvalidParameterValue: "... Message does not exist or is not available for
            # visibility timeout change."
            gone = code == "InvalidParameterValue" and "not available for visibility timeout change" in text
            if code not in NOT_OURS_ANY_MORE and not gone:
                raise
            obs.logger.warning("message no longer held by this delivery", extra={"error_code": code})


def queue_arn_from_url(url: str, region: str) -> str:
    """arn:aws:sqs:REGION:ACCOUNT:NAME from https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (or a local endpoint)."""
    account, name = url.rstrip("/").split("/")[-2:]
    return f"arn:aws:sqs:{region}:{account}:{name}"
