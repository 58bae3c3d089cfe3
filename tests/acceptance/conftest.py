from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.settings import Settings
from sitedispatch.local.deployment import DEPLOYMENT_FILE_NAME, Deployment
from sitedispatch.local.supervisor import LocalRuntime
from tests.conftest import wait_for

__all__ = ["as_function", "runtime", "wait_for"]  # imported from here by the acceptance tests


def as_function(runtime: LocalRuntime, role: str) -> Dependencies:
    """The dependencies of the runtime's deployed function `role` (the environment already names its cloud): its
    calls are judged by IAM against that role, as the function's own would be."""
    deployment = Deployment.read(runtime.workdir / DEPLOYMENT_FILE_NAME)
    return Dependencies(Settings(), credentials=deployment.functions[role].credentials)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[LocalRuntime]:
    with LocalRuntime(tmp_path / "runtime") as rt:
        yield rt
    # every process the test started is stopped
    assert all(not child.alive() for child in rt.children)
