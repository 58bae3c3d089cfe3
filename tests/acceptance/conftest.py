from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sitedispatch.local.supervisor import LocalRuntime
from tests.conftest import wait_for

__all__ = ["runtime", "wait_for"]  # wait_for is imported from here by the acceptance tests


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    with LocalRuntime(tmp_path / "runtime") as rt:
        yield rt
    # every process the test started is stopped
    assert all(not child.alive() for child in rt.children)
