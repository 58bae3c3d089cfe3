"""The local HTTP API of a test's cloud, and its callers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sitedispatch.client import ApiClient
from tests.conftest import Cloud, local_api


@pytest.fixture
def api(cloud: Cloud) -> Iterator[str]:
    with local_api() as url:
        yield url


def as_(url: str, who: str) -> ApiClient:
    """A client of the local API calling as `who`."""
    return ApiClient(url, identity=who)
