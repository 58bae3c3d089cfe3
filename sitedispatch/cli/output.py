"""Exit codes, error reporting and the table/JSON rendering every command shares."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sitedispatch.domain.errors import (
    Backpressure,
    Conflict,
    InvalidInput,
    NotFound,
    SiteDispatchError,
    Unreachable,
    error_document,
)

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_BACKPRESSURE = 75

console = Console()
err_console = Console(stderr=True)


def exit_code_for(exc: SiteDispatchError) -> int:
    if isinstance(exc, InvalidInput):
        return EXIT_INVALID
    if isinstance(exc, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, Backpressure):
        return EXIT_BACKPRESSURE
    if isinstance(exc, Conflict):
        return EXIT_CONFLICT
    return 1


@contextmanager
def reported(as_json: bool) -> Iterator[None]:
    """Turn domain errors into the documented exit codes, with one human line or a JSON error document; an AWS
    endpoint that does not answer, or refuses, becomes one line too (never a traceback)."""
    try:
        try:
            yield
        except Exception as exc:
            if not type(exc).__module__.startswith(("botocore", "pynamodb")):  # imported only when one failed
                raise
            raise aws_failure(exc) from None
    except SiteDispatchError as exc:
        if as_json:
            print(json.dumps(error_document(exc)))
        else:
            # one line, as long as it is (a path is not broken at the terminal's width), and the message as written
            # (a `[` in it is not markup)
            err_console.print(f"[bold red]error[/] ({exc.code}): {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(exit_code_for(exc)) from None


def aws_failure(exc: BaseException) -> SiteDispatchError:
    """What the user is told when AWS (or the local runtime standing in for it) fails a request."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, EndpointConnectionError):
            return Unreachable(
                f"nothing answers at {cause.kwargs.get('endpoint_url', 'the AWS endpoint')}: if this is the local "
                "runtime, start it with `sitedispatch local up` (or `make demo`) in this folder"
            )
        if isinstance(cause, ClientError):
            error = cause.response.get("Error", {})
            return Unreachable(f"AWS refused the request: {error.get('Code', '?')}: {error.get('Message', cause)}")
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return Unreachable(f"the AWS request failed: {exc}")


def plain(value: Any) -> Any:
    """Dataclasses, enums and tuples as JSON-ready values."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: plain(v) for k, v in asdict(value).items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(plain(value), indent=2, sort_keys=True, default=str) + "\n")


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


WIDE_COLUMNS = 10_000  # --wide: tables drawn this wide never narrow a column
wide_console = Console(width=WIDE_COLUMNS)  # what --wide draws tables with (the terminal's width is the other's)
_wide = False


def use_wide_tables(wide: bool) -> None:
    """--wide (for this command): every table as wide as its content, each id and command on one line to copy,
    whatever the terminal's width."""
    global _wide
    _wide = wide


def table(
    title: str, columns: list[str], rows: list[list[Any]], styler: Callable[[list[Any]], str] | None = None
) -> None:
    """A table whose cells are never cut: at the terminal's width a long id or command folds onto the next line
    (every character printed; --wide keeps each on one line)."""
    t = Table(title=title, show_lines=False)
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*(str(cell) for cell in row), style=styler(row) if styler else None)
    (wide_console if _wide else console).print(t)


STATUS_STYLE = {
    "succeeded": "green",
    "dead": "red",
    "running": "yellow",
    "queued": "cyan",
    "accepted": "cyan",
    "cancelled": "magenta",
    "superseded": "dim",
}


def render_status(report: Any) -> None:
    from sitedispatch.domain.resources import operation_lanes

    lanes = operation_lanes()

    def age(seconds: float | None, queue: str, messages: int) -> str:
        # an age is an operation's: a queue of publication steps, events or webhook wakes has messages but no age
        # SQS tells (on AWS its CloudWatch metric ApproximateAgeOfOldestMessage does)
        if seconds is not None:
            return f"{seconds:.1f}"
        return "not known" if messages and queue not in lanes else "-"

    table(
        "queues",
        ["queue", "visible", "in flight", "oldest age (s)", "DLQ depth", "DLQ oldest (s)"],
        [
            [
                q.queue,
                q.visible,
                q.in_flight,
                age(q.oldest_age_s, q.queue, q.visible),
                q.dlq_depth,
                age(q.dlq_oldest_age_s, q.queue, q.dlq_depth),
            ]
            for q in report.queues
        ],
        styler=lambda row: "red" if row[4] not in (0, "0") else "",
    )
    table("operation backlog", ["status", "operations"], [[k, v] for k, v in report.backlog_by_status.items()])
    if report.backlog_by_principal:
        table(
            "backlog per principal",
            ["principal", "operations"],
            [[k, v] for k, v in sorted(report.backlog_by_principal.items())],
        )
    if report.delay_by_site:
        table(
            "estimated delay per site (busiest first)",
            ["site", "backlog", "operation time (s)", "estimated delay (s)"],
            [[d.site_id, d.backlog, d.operation_s, d.paused or d.estimated_delay_s] for d in report.delay_by_site],
        )
    if report.delay_by_principal:
        table(
            "estimated delay per fairness key (principal, tenant) and lane (busiest first)",
            [
                "principal",
                "tenant",
                "lane",
                "backlog",
                "completed (5 min)",
                "operation time (s)",
                "estimated delay (s)",
            ],
            [
                [
                    d.principal,
                    d.tenant or "-",
                    d.lane,
                    d.backlog,
                    d.completed_recently,
                    d.operation_s,
                    d.estimated_delay_s,
                ]
                for d in report.delay_by_principal
            ],
        )
    if report.dependencies:
        table(
            "dependencies (deps show ID)",
            ["dependency", "breaker", "running", "rates"],
            [
                [
                    d.dependency_id,
                    d.state + (f": {d.reason}" if d.reason else ""),
                    d.running if d.max_running is None else f"{d.running} of {d.max_running}",
                    "; ".join(d.rates) or "unlimited",
                ]
                for d in report.dependencies
            ],
            styler=lambda row: "" if str(row[1]).startswith("closed") else "red",
        )
