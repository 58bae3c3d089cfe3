"""Per-container dependencies, built on first use (no client at import, so imports stay cheap for tests)."""

from __future__ import annotations

from functools import lru_cache

from sitedispatch.dependencies import Dependencies
from sitedispatch.settings import Settings


@lru_cache(maxsize=1)
def dependencies() -> Dependencies:
    return Dependencies(Settings())  # type: ignore[call-arg]  # fields come from the environment
