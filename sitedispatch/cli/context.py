"""Where the CLI finds its deployment: the environment, or the local runtime's env file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.errors import InvalidInput, NotConfigured
from sitedispatch.domain.settings import ENV_PREFIX, Settings
from sitedispatch.operator.controls import Caller

LOCAL_DEFAULT_CALLER = "operator"  # locally the person at the keyboard runs the runtime: the operator
LOCAL_DEFAULT_PRINCIPAL = "default"  # whom a local submit is for without --as

DEFAULT_LOCAL_ENV = Path(".sitedispatch") / "local.env"
_env_file: Path | None = None
_stack: str | None = None


def use_env_file(path: Path | None) -> None:
    """Remember which env file to load (set by the global --env-file option)."""
    global _env_file
    _env_file = path


def use_stack(name: str | None) -> None:
    """Remember which deployed stack to find the resources of (the global --stack option)."""
    global _stack
    _stack = name


def stack_environment(name: str, region: str | None = None) -> dict[str, str]:
    """A deployed stack's outputs as the environment Settings reads: each output named after a settings variable
    carries that variable's name in its description (see stacks/dispatch_stack.py)."""
    import boto3

    from sitedispatch.domain.errors import NotFound

    client = boto3.session.Session(region_name=region).client("cloudformation")
    try:
        stacks = client.describe_stacks(StackName=name)["Stacks"]
    except client.exceptions.ClientError as exc:
        raise NotFound(f"stack {name} not found: {exc.response['Error'].get('Message', exc)}") from None
    outputs = stacks[0].get("Outputs", [])
    found = {o["Description"]: o["OutputValue"] for o in outputs if o.get("Description", "").startswith(ENV_PREFIX)}
    if Settings.env_name("operations_queue_url") not in found:
        raise NotFound(f"stack {name} has no sitedispatch outputs")
    return found


@lru_cache(maxsize=1)
def deps() -> Dependencies:
    """Settings from a deployed stack's outputs (--stack), else the environment; if that names no deployment, from
    the local runtime's env file."""
    from sitedispatch.local.cloud import read_env_file

    if _stack is not None:
        os.environ.update(stack_environment(_stack))
    path = _env_file or DEFAULT_LOCAL_ENV
    if Settings.env_name("operations_queue_url") not in os.environ and path.exists():
        for key, value in read_env_file(path).items():
            os.environ.setdefault(key, value)
    try:
        return Dependencies(Settings())  # type: ignore[call-arg]
    except ValidationError as exc:
        invalid = [problem for problem in exc.errors() if problem["type"] != "missing"]
        if not invalid:
            raise NotConfigured(
                f"no sitedispatch deployment found from {Path.cwd()}: start the local runtime here with "
                "`sitedispatch local up` (or `make demo`), pass --env-file, or name a deployed stack with --stack NAME"
            ) from None
        name = Settings.env_name(str(invalid[0]["loc"][0])) if invalid[0]["loc"] else "settings"
        raise InvalidInput(f"{name}: {invalid[0]['msg']}", field=name) from None


def _identity(as_: str | None, local_default: str) -> tuple[str, bool]:
    """Who acts, and whether AWS said so: locally `--as NAME` (or `local_default`), on AWS the STS caller identity."""
    if "AWS_ENDPOINT_URL" in os.environ:
        return as_ or local_default, False
    return deps().caller_identity(), True


def principal(as_: str | None) -> str:
    """Whom a submit is for. Locally `--as NAME` (default `default`). On AWS the caller's IAM identity: a producer
    cannot submit as another principal (`--as`, if given, must name the caller itself)."""
    identity, from_aws = _identity(as_, LOCAL_DEFAULT_PRINCIPAL)
    if from_aws and as_ is not None and as_ != identity:
        raise InvalidInput(f"--as {as_!r}: on AWS you act as your IAM identity, {identity}", field="as")
    return identity


def caller(as_: str | None) -> Caller:
    """The caller of this command. Locally: `--as NAME` (default: the operator). On AWS: the STS caller identity;
    IAM has already decided what it may call, and the identity goes into every audit entry."""
    identity, _ = _identity(as_, LOCAL_DEFAULT_CALLER)
    return Caller.of(identity, deps().settings)
