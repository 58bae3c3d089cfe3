"""Shared fixtures: an in-process moto server on a free 127.0.0.1 port, and fresh resources per test."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.settings import Settings
from sitedispatch.local.cloud import create_resources, in_process_cloud, local_environment

# `make test` is deterministic: every property test draws the same examples on every run and machine (a failure CI
# finds is a failure anyone reproduces). `make fuzz` explores: fresh random examples, ten times as many, each run.
hypothesis_settings.register_profile("deterministic", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False, database=None)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "deterministic")
hypothesis_settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """A property test's example count: n in `make test`, ten times n when exploring."""
    return n * 10 if PROFILE == "explore" else n


_prefixes = itertools.count(1)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with in_process_cloud() as endpoint:
        yield endpoint


@dataclass
class Cloud:
    endpoint: str
    settings: Settings
    deps: Dependencies

    @property
    def env(self) -> dict[str, str]:
        return local_environment(self.settings, self.endpoint)


@pytest.fixture
def cloud(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Cloud:
    """Fresh queues, tables and bucket (unique prefix) and the environment pointing at them."""
    settings = create_resources(moto_endpoint, prefix=f"t{next(_prefixes)}-{os.getpid()}", function_timeout_s=10)
    for key, value in local_environment(settings, moto_endpoint).items():
        monkeypatch.setenv(key, value)
    return Cloud(moto_endpoint, settings, Dependencies(settings))


def pump(cloud: Cloud, max_rounds: int = 200) -> int:
    """Drive both queues through the real Lambda entrypoints in this process until they are empty (an in-process
    event source mapping for integration tests; the real-process one is `sitedispatch local worker`)."""
    import time

    import functions.operations_worker as operations
    import functions.publication_worker as publications
    from functions.runtime import dependencies
    from sitedispatch.aws.sqs import queue_arn_from_url
    from sitedispatch.local.esm import LambdaContext, settle, sqs_event

    for cache in (dependencies, operations.worker, publications.worker):
        cache.cache_clear()
    handled = 0
    queues = [
        (cloud.settings.operations_queue_url, operations.handler),
        (cloud.settings.bulk_queue_url, operations.handler),
        (cloud.settings.publications_queue_url, publications.handler),
    ]
    for _ in range(max_rounds):
        idle = True
        for url, handler in queues:
            messages = cloud.deps.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                continue
            idle = False
            event = sqs_event(messages, queue_arn_from_url(url, "us-east-1"), "us-east-1")
            response = handler(event, LambdaContext("Pump", 60, 512, "us-east-1", time.time()))
            settle(cloud.deps.sqs, url, messages, response)
            handled += len(messages)
        if idle:
            return handled
    raise AssertionError(f"queues still busy after {max_rounds} rounds")


def fresh_functions() -> None:
    """The functions' per-container caches forgotten: the next invocation builds them from this test's environment."""
    import functions.api as api
    from functions.runtime import dependencies

    dependencies.cache_clear()
    api.app.cache_clear()


@contextmanager
def local_api() -> Iterator[str]:
    """The HTTP API of this test's environment, served on a free 127.0.0.1 port from a thread (the local gateway
    in front of the API function); its URL, also in the environment where the CLI finds it."""
    from sitedispatch.domain.resources import API_URL_VARIABLE
    from sitedispatch.local.gateway import running_gateway

    fresh_functions()
    # The function runs in this process, whose stdout a CliRunner captures: its metrics (EMF lines printed to
    # stdout, as Lambda wants them) would land in the command's output. The local runtime's API process keeps them.
    changed = {API_URL_VARIABLE: "", "POWERTOOLS_METRICS_DISABLED": "true"}
    before = {key: os.environ.get(key) for key in changed}
    with running_gateway() as url:
        os.environ.update({**changed, API_URL_VARIABLE: url})
        try:
            yield url
        finally:
            for key, value in before.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    fresh_functions()


@contextmanager
def cli_runner(api: bool = True) -> Iterator[Any]:
    """A typer CliRunner whose CLI talks to this test's environment through the local HTTP API (`api=False`: to
    whatever the environment and working directory name, as a user's shell would)."""
    from contextlib import nullcontext

    from typer.testing import CliRunner

    from sitedispatch.cli import context as cli_context

    with local_api() if api else nullcontext():
        cli_context.reset()
        yield CliRunner()
    cli_context.reset()


def run_cli(runner: Any, *args: str) -> tuple[int, str]:
    """Exit code and output (stdout only for --json, so documents parse). Unexpected exceptions propagate."""
    from sitedispatch.cli.main import app

    result = runner.invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout if "--json" in args else result.output
