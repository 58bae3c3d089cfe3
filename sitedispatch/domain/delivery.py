"""What a worker did with one delivered message, and so whether the message is deleted."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sitedispatch.domain.model import Commit


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"  # committed now, or found already committed
    ACKED = "acked"  # nothing to do: unknown, terminal or duplicate
    DEFERRED = "deferred"  # paused site or held lease: back later, no attempt spent
    RETRYING = "retrying"  # attempt failed, backoff set
    DEAD = "dead"  # permanent failure or budget spent: dead-lettered
    CONTINUING = "continuing"  # a long operation's step recorded, the invocation's time spent: back at once

    @property
    def delete_message(self) -> bool:
        return self in {Outcome.SUCCEEDED, Outcome.ACKED, Outcome.DEAD}


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    reason: str = ""
    delay_s: float = 0.0
    commit: Commit | None = None
