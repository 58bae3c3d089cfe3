"""Where the CLI finds its deployment: the environment, or the local runtime's env file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import typer

from ..control import Caller
from ..dependencies import Dependencies
from ..settings import Settings

LOCAL_DEFAULT_CALLER = "operator"  # locally the person at the keyboard runs the runtime: the operator
AsOpt = Annotated[str | None, typer.Option("--as", help="who is acting (locally; on AWS the STS identity); "
                                                        "default: the operator")]

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


def caller(as_: str | None) -> Caller:
    """The caller of this command. Locally: `--as NAME` (default: the operator). On AWS: the STS caller identity;
    IAM has already decided what it may call, and the identity goes into every audit entry."""
    d = deps()
    if "AWS_ENDPOINT_URL" in os.environ:
        return Caller.of(as_ or LOCAL_DEFAULT_CALLER, d.settings)
    identity = d.caller_identity()
    return Caller.of(identity, d.settings)
