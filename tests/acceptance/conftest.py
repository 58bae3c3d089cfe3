from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, TypeVar

import pytest

from sitedispatch.local.supervisor import LocalRuntime

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | Literal[False] | None],
    timeout_s: float = 30.0,
    interval_s: float = 0.1,
    what: str = "condition",
) -> T:
    """Poll until `check()` is truthy; fail with `what` at the deadline (no bare sleeps in tests)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    with LocalRuntime(tmp_path / "runtime") as rt:
        yield rt
    # every process the test started is stopped
    assert all(not child.alive() for child in rt.children)
