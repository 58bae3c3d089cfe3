"""Shared fixtures: an in-process moto server on a free 127.0.0.1 port, and fresh resources per test."""

from __future__ import annotations

import functools
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from unittest.mock import patch

import pytest
from hypothesis import settings as hypothesis_settings

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.resources import QUEUES
from sitedispatch.domain.settings import Settings
from sitedispatch.local.cloud import deploy_local, in_process_cloud, local_environment
from sitedispatch.local.deployment import DEPLOYMENT_FILE_NAME, Deployment
from sitedispatch.local.iam import CALLS, IAM_CALLS_DIR_ENV, IAM_CALLS_FILE_NAME, patch_moto_iam_enforcement
from sitedispatch.local.localstack import localstack_python, running_localstack
from sitedispatch.local.strict import STRICT, STRICT_SEED_ENV, duplicate_chooser
from tests.factories import present

T = TypeVar("T")

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

# Every test marked `guarantee` (one of DESIGN.md's G1-G8, on moto or on the local runtime) runs twice: on moto as it
# is, and on the strict local cloud (local/strict.py: lagging index reads, transaction conflicts, S3 409s, lost
# deletes), seeded with this. Replay one: pytest 'tests/...::test_x[strict]'.
STRICT_TEST_SEED = 11
EMULATIONS = ("moto", "strict")


TIERS = ("unit", "integration", "acceptance", "infrastructure")  # a folder of tests/ each, and the marker of its tests


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test carries its folder's marker (`-m integration` selects tests/integration, whole)."""
    tier = Path(str(item.path)).relative_to(Path(__file__).parent).parts[0]
    if tier in TIERS:
        item.add_marker(tier)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `second_emulator` run only when LocalStack is asked for (`make test-localstack` names its
    environment): deselected, not skipped, elsewhere."""
    if localstack_python() is not None:
        return
    chosen = [item for item in items if not item.get_closest_marker("second_emulator")]
    if len(chosen) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
        items[:] = chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("guarantee") and "emulation" in metafunc.fixturenames:
        # A test whose moto run only repeats its strict one: that run is `long` (make chaos, not make test).
        repeat = [pytest.mark.long] if metafunc.definition.get_closest_marker("strict_suffices") else []
        params = [pytest.param(mode, marks=repeat if mode == "moto" else []) for mode in EMULATIONS]
        metafunc.parametrize("emulation", params, indirect=True)


@pytest.fixture(autouse=True)
def emulation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """ "moto", or "strict": this process's moto and every local cloud the test starts behave as AWS does where
    moto is kinder. Autouse, so it is in force before any fixture starts a cloud or a runtime."""
    mode = getattr(request, "param", "moto")
    if mode != "strict":
        yield mode
        return
    monkeypatch.setenv(STRICT_SEED_ENV, str(STRICT_TEST_SEED))  # LocalRuntime.start_cloud and pump read it
    STRICT.enable(STRICT_TEST_SEED)
    try:
        yield mode
    finally:
        STRICT.disable()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with in_process_cloud() as endpoint:
        patch_moto_iam_enforcement()  # the functions' calls pump and local_api make are judged against their roles
        try:
            yield endpoint
        finally:
            keep_judged_calls()


_deployed: list[Deployment] = []  # every stack this process's tests deployed, for the IAM report


def keep_judged_calls() -> None:
    """With SITEDISPATCH_IAM_CALLS_DIR set (make test), each stack this process deployed and the calls IAM judged
    for its functions, as a local runtime leaves them (the IAM report reads both)."""
    into = os.environ.get(IAM_CALLS_DIR_ENV)
    if not into:
        return
    calls = CALLS.calls()
    for deployment in _deployed:
        roles = {f.role_arn.rsplit("/", 1)[1] for f in deployment.functions.values()}
        mine = [c for c in calls if c["role"] in roles]
        if not mine:
            continue
        kept = Path(into) / f"in-process-{deployment.stack_name}"
        kept.mkdir(parents=True, exist_ok=True)
        deployment.write(kept / DEPLOYMENT_FILE_NAME)
        (kept / IAM_CALLS_FILE_NAME).write_text(json.dumps(mine))


@pytest.fixture(scope="session")
def sqs_s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """LocalStack's SQS and S3 for the whole session when SITEDISPATCH_LOCALSTACK_PYTHON names its environment
    (`make test-localstack`): every `cloud` then keeps its queues and bucket there, its tables on moto."""
    python = localstack_python()
    if python is None:
        yield None
        return
    with running_localstack(python, tmp_path_factory.mktemp("localstack")) as endpoint:
        yield endpoint


@dataclass
class Cloud:
    endpoint: str
    settings: Settings
    deps: Dependencies  # the test's own: the account's administrator
    deployment: Deployment
    sqs_s3_endpoint: str | None = None
    roles: dict[str, Dependencies] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return local_environment(self.settings, self.endpoint, sqs_s3_endpoint=self.sqs_s3_endpoint)

    def as_function(self, role: str) -> Dependencies:
        """The dependencies of the deployed function `role`: its clients sign as its role, so IAM judges its calls."""
        if role not in self.roles:
            credentials = self.deployment.functions[role].credentials
            self.roles[role] = Dependencies(Settings(), credentials=credentials)
        return self.roles[role]


_current: list[Cloud] = []  # the running test's cloud, whose roles the in-process functions act as


@pytest.fixture
def cloud(moto_endpoint: str, sqs_s3_endpoint: str | None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    """A fresh stack (unique prefix) deployed from the template, and the environment pointing at it."""
    settings, deployment = deploy_local(
        moto_endpoint,
        prefix=f"t{next(_prefixes)}-{os.getpid()}",
        function_timeout_s=10,
        sqs_s3_endpoint=sqs_s3_endpoint,
    )
    _deployed.append(deployment)
    for key, value in local_environment(settings, moto_endpoint, sqs_s3_endpoint=sqs_s3_endpoint).items():
        monkeypatch.setenv(key, value)
    deployed = Cloud(moto_endpoint, settings, Dependencies(settings), deployment, sqs_s3_endpoint)
    _current[:] = [deployed]
    yield deployed
    _current.clear()


@contextmanager
def as_deployed(functions: dict[str, Any]) -> Iterator[None]:
    """While inside, each function module (by role) gets the dependencies of its deployed role, built once per test:
    its calls are judged by IAM as on AWS. Outside a test with a cloud, nothing changes."""
    if not _current:
        yield
        return
    cloud = _current[0]
    before = {role: module.dependencies for role, module in functions.items()}
    try:
        for role, module in functions.items():
            module.dependencies = functools.partial(cloud.as_function, role)
        yield
    finally:
        for role, module in functions.items():
            module.dependencies = before[role]


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


def assert_committed_once(deps: Dependencies, site: str, operation_ids: list[str], timeout_s: float = 5.0) -> None:
    """The site's commits are exactly `operation_ids` (newest first), one each: first what reads consistently (the
    site's row at that many versions, each commit by its key), then the by-site history, an index that AWS and the
    strict local cloud update after the write, waited for within `timeout_s`."""
    assert present(deps.sites.get(site)).head_version == len(operation_ids)
    assert all(deps.commits.get(op_id) is not None for op_id in operation_ids)
    wait_for(
        lambda: [c.operation_id for c in deps.commits.history(site)] == operation_ids,
        timeout_s=timeout_s,
        what=f"{site}'s history to show {operation_ids}",
    )


def registered(cloud: Cloud, site: str, principal: str = "default") -> str:
    """A site registered (as `sites register` does), not provisioned: other work may then be submitted for it
    (`default`: whom the local CLI submits for without --as)."""
    cloud.deps.sites.register(site, principal, time.time())
    return site


def pump(cloud: Cloud, max_rounds: int = 200) -> int:
    """Drive every queue through the real Lambda entrypoints in this process until they are empty (an in-process
    event source mapping for integration tests; the real-process one is `sitedispatch local worker`)."""
    import sitedispatch.functions.events_worker as events
    import sitedispatch.functions.operations_worker as operations
    import sitedispatch.functions.publication_worker as publications
    import sitedispatch.functions.webhooks_worker as webhooks
    from sitedispatch.aws.sqs import queue_arn_from_url
    from sitedispatch.functions.runtime import dependencies
    from sitedispatch.local.esm import LambdaContext, settle, sqs_event

    caches = {"operations": operations.worker, "bulk": operations.worker, "publications": publications.worker}
    caches |= {"events": events.worker, "webhooks": webhooks.deliverer}
    for cache in (dependencies, *caches.values()):
        cache.cache_clear()
    handled = 0
    modules = {"operations": operations, "bulk": operations, "publications": publications}
    modules |= {"events": events, "webhooks": webhooks}
    acting: dict[Any, str] = {}  # the role each module's cached core was built for
    for _ in range(max_rounds):
        idle = True
        for lane, module in modules.items():  # each queue consumed by its function, as its role
            url = getattr(cloud.settings, QUEUES[lane].url_field)
            messages = cloud.deps.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
            ).get("Messages", [])
            if not messages:
                continue
            idle = False
            role = QUEUES[lane].function
            if acting.get(module) != role:  # the bulk lane's function runs the operations worker's module
                caches[lane].cache_clear()
                acting[module] = role
            event = sqs_event(messages, queue_arn_from_url(url, "us-east-1"), "us-east-1")
            with as_deployed({role: module}):
                response = module.handler(event, LambdaContext("Pump", 60, 512, "us-east-1", time.time()))
            settle(cloud.deps.sqs, url, messages, response, duplicate_chooser(0))  # strict: a few deletes lost
            handled += len(messages)
        if idle:
            for cache in caches.values():
                cache.cache_clear()  # built for a role: not for whatever calls the module next
            return handled
    raise AssertionError(f"queues still busy after {max_rounds} rounds")


def fresh_functions() -> None:
    """The functions' per-container caches forgotten: the next invocation builds them from this test's environment."""
    import sitedispatch.functions.api as api
    from sitedispatch.functions.runtime import dependencies

    dependencies.cache_clear()
    api.app.cache_clear()


@contextmanager
def metrics_cleared_at_each_flush() -> Iterator[None]:
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

    flush = AmazonCloudWatchEMFProvider.flush_metrics

    def flush_then_clear(self: AmazonCloudWatchEMFProvider, raise_on_empty_metrics: bool = False) -> None:
        flush(self, raise_on_empty_metrics)
        self.clear_metrics()

    with patch.object(AmazonCloudWatchEMFProvider, "flush_metrics", flush_then_clear):
        yield


@contextmanager
def local_api() -> Iterator[str]:
    """The HTTP API of this test's environment, served on a free 127.0.0.1 port from a thread (the local gateway
    in front of the API function); its URL, also in the environment where the CLI finds it."""
    import sitedispatch.functions.api as api
    from sitedispatch.domain.resources import API_URL_VARIABLE
    from sitedispatch.local.gateway import running_gateway

    fresh_functions()
    # The function runs in this process, whose stdout a CliRunner captures: its metrics (EMF lines printed to
    # stdout, as Lambda wants them) would land in the command's output. The local runtime's API process keeps them.
    # Disabled, Powertools keeps what each flush would have printed, and prints it all (ignoring the setting) once
    # 100 metrics have piled up: the flush clears them here as it would have after printing.
    changed = {API_URL_VARIABLE: "", "POWERTOOLS_METRICS_DISABLED": "true"}
    before = {key: os.environ.get(key) for key in changed}
    with as_deployed({"api": api}), metrics_cleared_at_each_flush(), running_gateway() as url:
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
