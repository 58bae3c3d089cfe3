"""What a function loads before its first event: only what its path uses (issue 16's cold start), and the settings
read from the environment without a settings library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.coldstart import lambda_environment, placeholder_settings
from sitedispatch.domain.settings import Settings
from tests.factories import settings

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"


def loaded_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module`, in a deployed function's environment."""
    env = {**os.environ, **placeholder_settings(), **lambda_environment("127.0.0.1:2000")}  # nothing is sent at import
    env.pop("POWERTOOLS_TRACE_DISABLED", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def under(modules: set[str], prefix: str) -> set[str]:
    return {m for m in modules if m == prefix or m.startswith(prefix + ".")}


@pytest.mark.parametrize("module", ["sitedispatch.functions.api", "sitedispatch.functions.reconciler"])
def test_the_api_and_the_reconciler_do_not_load_the_queue_consumers_batch_utility(module: str) -> None:
    loaded = loaded_by(module)
    assert not under(loaded, "aws_lambda_powertools.utilities.batch")
    assert not under(loaded, "sitedispatch.operations.worker")


def test_the_publication_function_does_not_load_the_operations_worker_graph() -> None:
    loaded = loaded_by("sitedispatch.functions.publication_worker")
    assert "sitedispatch.publication.worker" in loaded
    assert not under(loaded, "sitedispatch.operations")


@pytest.mark.parametrize(
    "module",
    [
        "sitedispatch.functions.operations_worker",
        "sitedispatch.functions.publication_worker",
        "sitedispatch.functions.api",
        "sitedispatch.functions.reconciler",
    ],
)
def test_tracing_patches_only_what_the_functions_call_and_no_settings_library_loads(module: str) -> None:
    loaded = loaded_by(module)
    assert "aws_xray_sdk.ext.botocore.patch" in loaded  # tracing is on, as deployed, and AWS calls are traced
    assert not under(loaded, "requests")  # X-Ray's patch_all would import it to patch it
    assert not under(loaded, "sqlite3")
    assert not under(loaded, "pydantic_settings")


def test_settings_prefer_what_is_passed_over_the_environment_and_refuse_bad_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = settings()
    for key, value in base.to_environment().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(Settings.env_name("attempt_budget"), "9")
    assert Settings().attempt_budget == 9  # text from the environment, converted
    assert Settings(attempt_budget=3).attempt_budget == 3  # a value passed wins
    monkeypatch.setenv(Settings.env_name("attempt_budget"), "many")
    with pytest.raises(ValidationError, match="attempt_budget"):
        Settings()
    monkeypatch.setenv(Settings.env_name("attempt_budget"), "0")  # below its minimum of 1
    with pytest.raises(ValidationError, match="attempt_budget"):
        Settings()
    monkeypatch.delenv(Settings.env_name("bucket"))
    with pytest.raises(ValidationError, match="bucket"):
        Settings()


def test_every_table_model_builds_its_client_from_the_process_session() -> None:
    import botocore.session

    from sitedispatch.aws.tables import TableNames, build_models

    session = botocore.session.get_session()
    models = build_models(TableNames("o", "s", "c", "p", "n", "a", "e", "f", "w", "d"), "us-east-1", session=session)
    connections = {id(model._get_connection().connection) for model in models.all()}
    assert len(connections) == 1
    assert models.Operation._get_connection().connection.session is session
