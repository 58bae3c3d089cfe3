"""Dependencies through the CLI as an operator and a site's owner use them: set, list, show, pause, resume, clear;
every mistake one line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from sitedispatch.cli.deps import parse_rate
from sitedispatch.domain.errors import InvalidInput
from tests.conftest import Cloud, cli_runner, run_cli

run = run_cli


@pytest.fixture
def cli(cloud: Cloud) -> Iterator[CliRunner]:
    with cli_runner() as runner:
        yield runner


def test_the_dependency_runbook_through_the_cli(cli: CliRunner) -> None:
    code, out = run(
        cli,
        "deps",
        "set",
        "db:a",
        "--max-running",
        "4",
        "--rate",
        "publish=20/min+5",
        "--reason",
        "4 writers",
        "--as",
        "operator",
    )
    assert code == 0, out
    assert "0 of 4 running" in out and "20 per minute (burst 5, publish)" in out
    code, out = run(
        cli, "sites", "register", "dep-s1", "--driver", "reference", "--dependency", "db:a", "--as", "tenant-a"
    )
    assert code == 0, out
    code, out = run(cli, "sites", "get", "dep-s1", "--as", "tenant-a")
    assert code == 0 and "db:a" in out, out
    code, out = run(cli, "deps", "list", "--as", "tenant-a", "--json")
    assert code == 0 and [d["dependency_id"] for d in json.loads(out)] == ["db:a"], out
    code, out = run(cli, "deps", "show", "db:a", "--as", "tenant-b")
    assert code != 0 and out.strip().count("\n") == 0 and "not found" in out, out

    code, out = run(cli, "deps", "pause", "db:a", "--reason", "cluster maintenance", "--as", "operator")
    assert code == 0 and "paused: cluster maintenance" in out, out
    code, out = run(cli, "deps", "resume", "db:a", "--reason", "mine", "--as", "tenant-a")
    assert code != 0 and "only operators" in out and out.strip().count("\n") == 0, out
    code, out = run(cli, "deps", "resume", "db:a", "--reason", "done", "--as", "operator")
    assert code == 0 and "closed" in out, out

    code, out = run(cli, "sites", "dependencies", "dep-s1", "php:pool-1", "--reason", "moved", "--as", "tenant-a")
    assert code == 0 and "dep-s1 names php:pool-1" in out, out
    code, out = run(cli, "deps", "clear", "db:a", "--reason", "unlimited", "--as", "operator", "--json")
    assert code == 0 and json.loads(out)["max_running"] is None, out


def test_a_rate_written_wrong_is_one_line_and_the_forms_it_takes_parse() -> None:
    assert parse_rate("20/min+5") == {"kind": "all", "limit": 20, "period_s": 60.0, "burst": 5}
    assert parse_rate("import=30/h") == {"kind": "import", "limit": 30, "period_s": 3600.0, "burst": 1}
    assert parse_rate("3/90")["period_s"] == 90.0 and parse_rate("1/2day")["period_s"] == 172_800.0
    for wrong in ("20", "20/fortnight", "x=/min", "20/min+"):
        with pytest.raises(InvalidInput, match="--rate takes"):
            parse_rate(wrong)


def test_a_bad_rate_or_nothing_to_set_is_one_line(cli: CliRunner) -> None:
    code, out = run(cli, "deps", "set", "db:a", "--rate", "20/fortnight", "--reason", "r", "--as", "operator")
    assert code != 0 and "--rate takes" in out and out.strip().count("\n") == 0, out
    code, out = run(cli, "deps", "set", "db:a", "--reason", "r", "--as", "operator")
    assert code != 0 and "give --max-running, --rate or both" in out, out
    code, out = run(cli, "deps", "set", "db:a", "--rate", "publish=1000/s", "--reason", "r", "--as", "operator")
    assert code != 0 and "starts a second" in out and out.strip().count("\n") == 0, out


def test_a_fairness_keys_rate_through_quotas_set_and_clear(cli: CliRunner) -> None:
    args = ("quotas", "set", "tenant-r", "--rate", "import=30/h+2", "--tenant", "shop-1", "--reason", "r")
    code, out = run(cli, *args, "--as", "operator", "--json")
    assert code == 0 and json.loads(out)["rates"] == ["30 per hour (burst 2, import)"], out
    code, out = run(cli, "quotas", "get", "tenant-r", "--tenant", "shop-1", "--as", "tenant-r", "--json")
    assert code == 0 and json.loads(out)["rates"] == ["30 per hour (burst 2, import)"], out
    code, out = run(
        cli, "quotas", "set", "tenant-r", "--no-rates", "--tenant", "shop-1", "--reason", "r", "--as", "operator"
    )
    assert code == 0 and "unlimited" in out, out
