"""A long-lived process's warm-up (Dependencies.warm) pays the first-call costs ahead of its first request; a
function's init phase (sitedispatch/functions/runtime.py) builds its clients and sends nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.coldstart import lambda_environment, placeholder_settings
from sitedispatch.dependencies import WARM_UP_KEY, Dependencies
from sitedispatch.domain.resources import LAMBDA_FUNCTION_NAME_ENV
from tests.conftest import Cloud

ROOT = Path(__file__).resolve().parents[2]


def test_warm_reads_through_the_table_client_once_and_never_fails_an_init(cloud: Cloud) -> None:
    deps = Dependencies(cloud.settings)
    calls: list[dict[str, Any]] = []
    client = deps.models.Operation._get_connection().connection.client
    client.meta.events.register("provide-client-params.dynamodb.GetItem", lambda params, **_: calls.append(params))

    deps.warm()

    assert [(c["TableName"], c["Key"]) for c in calls] == [
        (cloud.settings.sites_table, {"site_id": {"S": WARM_UP_KEY}})
    ]  # a table every function's role may read
    broken = Dependencies(cloud.settings.model_copy(update={"sites_table": "no-such-table"}))
    assert broken.warm() is broken  # the warm-up read failed (logged); the init goes on


INIT_PROBE = """
import json, {module}
from sitedispatch.functions.runtime import dependencies
built = dependencies.cache_info().currsize == 1 and dependencies().__dict__
print(json.dumps(sorted(k for k in (built or {{}}) if k in ("sqs", "s3", "models"))))
"""


@pytest.mark.parametrize(
    "module",
    [
        "sitedispatch.functions.operations_worker",
        "sitedispatch.functions.publication_worker",
        "sitedispatch.functions.api",
        "sitedispatch.functions.reconciler",
    ],
)
def test_a_function_builds_its_clients_in_the_init_phase_without_a_request_and_only_inside_lambda(
    module: str,
) -> None:
    """Inside an execution environment (Lambda's AWS_LAMBDA_FUNCTION_NAME) the import builds the clients, and sends
    nothing (the local runtime forks after it: an open connection would be shared); anywhere else it builds none."""
    with socket.socket() as listener:  # every AWS endpoint points here: a request would be a connection
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        endpoint = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{listener.getsockname()[1]}"}
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        lambda_env = {**os.environ, **placeholder_settings(), **lambda_environment("127.0.0.1:2000"), **endpoint}
        outside = {k: v for k, v in lambda_env.items() if k != LAMBDA_FUNCTION_NAME_ENV}
        runs = {}
        for name, env in (("inside", lambda_env), ("outside", outside)):
            done = subprocess.run(
                [sys.executable, "-c", INIT_PROBE.format(module=module)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env={**env, **creds},
                check=True,
                timeout=60,
            )
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert runs["inside"] == ["models", "s3", "sqs"]
    assert runs["outside"] == []
