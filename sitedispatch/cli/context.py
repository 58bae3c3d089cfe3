"""Where the CLI finds its deployment: the environment, or the local runtime's env file."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sitedispatch.domain.errors import InvalidInput, NotConfigured
from sitedispatch.domain.model import check_principal
from sitedispatch.domain.resources import API_URL_VARIABLE, ENV_PREFIX

if TYPE_CHECKING:
    from sitedispatch.client import ApiClient
    from sitedispatch.dependencies import Dependencies

# Locally every command acts as this principal unless --as names another: one identity, whose sites, operations,
# events and webhooks are one another's. An operator is named (--as operator), never defaulted.
LOCAL_DEFAULT_PRINCIPAL = "default"
DEFAULTED_HINT = (
    f"locally you act as {LOCAL_DEFAULT_PRINCIPAL!r} unless --as names another; an operator's command takes "
    "--as operator"
)

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


def current_stack() -> str | None:
    """The deployed stack the global --stack option named, if any."""
    return _stack


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
    if API_URL_VARIABLE not in found:
        raise NotFound(f"stack {name} has no sitedispatch API output")
    return found


def find_local_env(start: Path | None = None) -> Path:
    """.sitedispatch/local.env in this folder or the nearest one above it that has one (as git finds .git), else
    where it would be here."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_LOCAL_ENV).exists():
            return folder / DEFAULT_LOCAL_ENV
    return DEFAULT_LOCAL_ENV


def load_local_env() -> Path | None:
    """The local runtime's env file (--env-file, else .sitedispatch/local.env here or in a folder above),
    loaded into the environment for what is not set already; the file, if there is one."""
    from sitedispatch.local.cloud import read_env_file

    path = _env_file or find_local_env()
    if not path.exists():
        if _env_file is not None:
            raise NotConfigured(f"{path} does not exist: start the local runtime with `sitedispatch local up`")
        return None
    for key, value in read_env_file(path).items():
        os.environ.setdefault(key, value)
    return path


@lru_cache(maxsize=1)
def api_url() -> str:
    """The API's URL: a deployed stack's output (--stack), the environment, or the local runtime's env file."""
    variable = API_URL_VARIABLE
    if _stack is not None:
        os.environ.update(stack_environment(_stack))
    if variable not in os.environ:
        found = load_local_env()
        if variable not in os.environ:
            where = f"{found} names no API (is the local runtime up?)" if found else f"none found from {Path.cwd()}"
            raise NotConfigured(
                f"no sitedispatch API: {where}. Start the local runtime here with `sitedispatch local up` (or "
                f"`make demo`), pass --env-file, name a deployed stack with --stack NAME, or set {variable}"
            )
    return os.environ[variable]


@lru_cache(maxsize=8)
def client(as_: str | None = None) -> ApiClient:
    """The API client for this command. Locally the caller is `--as NAME`, else the principal `default` (a refusal
    then says how to act as another); on AWS it is the identity of your credentials, which sign every request
    (`--as` is refused: the API would ignore it)."""
    from sitedispatch.client import ApiClient, SigV4, is_local

    url = api_url()
    if is_local(url):
        if as_ is not None:
            check_principal(as_, field="as")  # the identity header carries it: only what a principal may be
            return ApiClient(url, identity=as_)
        return ApiClient(url, identity=LOCAL_DEFAULT_PRINCIPAL, forbidden_hint=DEFAULTED_HINT)
    if as_ is not None:
        raise InvalidInput("--as names the caller of a local runtime; on AWS you act as your credentials' identity")
    return ApiClient(url, signer=SigV4(os.environ.get(f"{ENV_PREFIX}REGION") or os.environ.get("AWS_REGION")))


def require_running_cloud() -> str:
    """The local cloud's endpoint, once it answers; else Unreachable in one line (an env file left by a runtime that
    stopped names an endpoint nothing listens on)."""
    import socket
    from urllib.parse import urlsplit

    from sitedispatch.domain.errors import Unreachable

    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    where = urlsplit(endpoint)
    try:
        socket.create_connection((where.hostname or "127.0.0.1", where.port or 80), timeout=2).close()
    except OSError:
        raise Unreachable(
            f"nothing answers at {endpoint or 'the local cloud'}: the local runtime is not running (start it with "
            "`sitedispatch local up`, or `sitedispatch local cloud` first)"
        ) from None
    return endpoint


@lru_cache(maxsize=1)
def deps() -> Dependencies:
    """The core's dependencies, for the local runtime's own processes only (they are the functions): settings from
    the environment, else the local runtime's env file. Commands a user types go through the API (`client`)."""
    from pydantic import ValidationError

    from sitedispatch.dependencies import Dependencies
    from sitedispatch.domain.settings import Settings

    if Settings.env_name("operations_queue_url") not in os.environ:
        load_local_env()
    try:
        return Dependencies(Settings())
    except ValidationError as exc:
        invalid = [problem for problem in exc.errors() if problem["type"] != "missing"]
        if not invalid:
            raise NotConfigured(
                f"no local runtime found from {Path.cwd()}: start it here with `sitedispatch local up` (or "
                "`make demo`), or pass --env-file"
            ) from None
        name = Settings.env_name(str(invalid[0]["loc"][0])) if invalid[0]["loc"] else "settings"
        raise InvalidInput(f"{name}: {invalid[0]['msg']}", field=name) from None


def reset() -> None:
    """Forget the API, clients and dependencies found (tests run many commands in one process)."""
    for cache in (api_url, client, deps):
        cache.cache_clear()
