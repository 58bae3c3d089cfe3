"""Requests that met another writer on the same item and wrote nothing: sent again after a short jittered backoff.

Two AWS answers mean exactly that, and AWS advises retrying both: a DynamoDB transaction cancelled only by
`TransactionConflict` (another transaction or write was in progress on one of its items,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling)
and an S3 conditional write answered `409 ConditionalRequestConflict` (another conditional write of the same key
was in progress, https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). The other writer
holds the item for some tens of milliseconds, so the backoff stays near that (10 ms doubling to 80 ms, jittered
0.5-1.5x) rather than idle the item, and many writers at once on one item take their turns within the patience.
Past it the caller gets a TransientError (nothing was written): the API answers 503, a worker retries.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sitedispatch.domain.errors import TransientError

CONFLICT_PATIENCE_S = 5.0
CONFLICT_BACKOFF_S = 0.01
CONFLICT_BACKOFF_CAP_S = 0.08
T = TypeVar("T")


class Conflicted(Exception):
    """Raised by a request function when its request met another writer and wrote nothing (`cause`: AWS's answer)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def retried_on_conflict(request: Callable[[], T], what: str, code: str, patience_s: float = CONFLICT_PATIENCE_S) -> T:
    """`request()` until it does not raise Conflicted, for up to `patience_s`; then TransientError(`code`)."""
    deadline = time.monotonic() + patience_s
    for attempt in itertools.count():
        try:
            return request()
        except Conflicted as conflicted:
            backoff = min(CONFLICT_BACKOFF_CAP_S, CONFLICT_BACKOFF_S * 2 ** min(attempt, 8)) * (0.5 + random.random())
            if time.monotonic() + backoff > deadline:
                raise TransientError(
                    f"{what} met other writers for {patience_s:.0f} s; nothing was written", code=code
                ) from conflicted.cause
            time.sleep(backoff)
    raise AssertionError("unreachable")  # itertools.count() never ends
