"""What the benchmarks share: waiting for a condition with a deadline, a record that must exist, a provision's input."""

from __future__ import annotations

import time
from typing import Any, TypeVar

T = TypeVar("T")
PROVISION = {"title": "Bench", "admin_email": "bench@example.org"}


def present(value: T | None) -> T:
    assert value is not None, "the benchmark expected a record that is missing"
    return value


def wait(check: Any, timeout_s: float, what: str) -> Any:
    """`check()`'s first truthy value, polled every 0.1 s; TimeoutError naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
