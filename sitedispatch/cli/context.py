"""Where the CLI finds its deployment: the environment, or the local runtime's env file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from ..dependencies import Dependencies
from ..settings import Settings

DEFAULT_LOCAL_ENV = Path(".sitedispatch") / "local.env"
_env_file: Path | None = None


def use_env_file(path: Path | None) -> None:
    """Remember which env file to load (set by the global --env-file option)."""
    global _env_file
    _env_file = path


@lru_cache(maxsize=1)
def deps() -> Dependencies:
    """Settings from the environment; if it names no deployment, from the local runtime's env file."""
    from ..local.cloud import read_env_file

    path = _env_file or DEFAULT_LOCAL_ENV
    if Settings.env_name("operations_queue_url") not in os.environ and path.exists():
        for key, value in read_env_file(path).items():
            os.environ.setdefault(key, value)
    return Dependencies(Settings())  # type: ignore[call-arg]
