"""An execution environment's init (Dependencies.warm) pays the first-call costs ahead of the first delivery."""

from __future__ import annotations

from typing import Any

from sitedispatch.dependencies import WARM_UP_KEY, Dependencies
from tests.conftest import Cloud


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
