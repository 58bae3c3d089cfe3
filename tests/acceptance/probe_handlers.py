"""Handlers the emulator tests plug into `local worker --handler`: they record what Lambda would have given them."""

from __future__ import annotations

import json
import os
import time
from typing import Any


def _record(entry: dict[str, Any]) -> None:
    with open(os.environ["PROBE_LOG"], "a") as fh:
        fh.write(json.dumps(entry) + "\n")


def record_and_fail_some(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Fails every record whose body says "fail"; records the event and the context it saw."""
    _record(
        {
            "pid": os.getpid(),
            "records": event["Records"],
            "remaining_ms": context.get_remaining_time_in_millis(),
            "request_id": context.aws_request_id,
            "function": context.function_name,
        }
    )
    return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"] if "fail" in r["body"]]}


def sleep_past_timeout(event: dict[str, Any], context: Any) -> dict[str, Any]:
    _record({"pid": os.getpid(), "started": time.time(), "body": event["Records"][0]["body"]})
    time.sleep(30)
    _record({"pid": os.getpid(), "finished": True})  # never reached: the environment is killed at the timeout
    return {"batchItemFailures": []}


def operations_dying_after_commit(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The real operations worker, in an environment that is SIGKILLed right after any transition that wrote an
    event commits, before the event's message is sent (the outbox's window)."""
    import signal

    from sitedispatch.aws.events import EventOutbox
    from sitedispatch.functions.operations_worker import handler

    def die(self: EventOutbox, message: Any) -> None:
        _record({"pid": os.getpid(), "killed_before_sending": message.event_id})
        os.kill(os.getpid(), signal.SIGKILL)

    EventOutbox.send = die  # type: ignore[method-assign]
    return handler(event, context)
