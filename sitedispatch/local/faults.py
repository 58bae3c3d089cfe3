"""Transient AWS errors injected into a local worker's clients through botocore's event hooks (the chaos campaign).

Only faults AWS really returns, at a seeded rate: throttling and 5xx from every service, and DynamoDB's
TransactionConflict (a TransactWriteItems cancelled because another request touched one of its items). Never a false
ConditionalCheckFailed: DynamoDB does not invent those, and the code rightly treats them as facts. The event-source
poller's own client is left alone (on AWS it is Lambda's, not the function's).
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from typing import Any

from botocore.exceptions import ClientError

RATE_ENV = "SITEDISPATCH_LOCAL_FAULT_RATE"
SEED_ENV = "SITEDISPATCH_LOCAL_FAULT_SEED"

GENERIC = (
    ("ThrottlingException", 400, "Rate exceeded (injected)"),
    ("InternalFailure", 500, "We encountered an internal error (injected)"),
    ("ServiceUnavailable", 503, "Service unavailable (injected)"),
)
S3_FAULTS = (
    ("SlowDown", 503, "Please reduce your request rate (injected)"),
    ("InternalError", 500, "We encountered an internal error (injected)"),
)


class FaultInjector:
    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.injected: Counter[str] = Counter()

    def __call__(self, model: Any, params: Any, **_: Any) -> None:
        if self.rng.random() >= self.rate:
            return
        service = model.service_model.service_name
        operation = model.name
        if service == "dynamodb" and operation == "TransactWriteItems":
            items = len(params.get("TransactItems", [])) if isinstance(params, dict) else 1
            reasons = [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}]
            reasons += [{"Code": "None"}] * max(0, items - 1)
            self._record(f"{service}:TransactionConflict")
            raise ClientError(
                _response(
                    "TransactionCanceledException",
                    "Transaction cancelled (injected conflict)",
                    400,
                    CancellationReasons=reasons,
                ),
                operation,
            )
        code, status, message = self.rng.choice(S3_FAULTS if service == "s3" else GENERIC)
        self._record(f"{service}:{code}")
        raise ClientError(_response(code, message, status), operation)

    def _record(self, kind: str) -> None:
        self.injected[kind] += 1
        print(json.dumps({"fault": kind}), file=sys.stderr, flush=True)


def _response(code: str, message: str, status: int, **extra: Any) -> Any:
    """A parsed error response as botocore builds it (typed loosely: the stubs want every metadata key)."""
    return {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}, **extra}


def install_from_environment(clients: list[Any], stream: int) -> FaultInjector | None:
    """Hook every client in `clients` when the environment asks for faults (a chaos run); otherwise do nothing.
    `stream` (the execution environment's index) gives each environment its own seeded sequence."""
    rate = float(os.environ.get(RATE_ENV, "0") or 0)
    if rate <= 0:
        return None
    seed = int(os.environ.get(SEED_ENV, "0")) * 1000 + stream
    injector = FaultInjector(rate, seed)
    for client in clients:
        client.meta.events.register("before-call.*.*", injector)
    return injector
