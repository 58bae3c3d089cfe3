"""The options and argument parsers every command shares, defined once."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated, Any

import typer

from sitedispatch.domain.errors import InvalidInput

JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]
AsOpt = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="who is acting, locally (default: the principal `default`; operators: --as operator); on AWS "
        "your credentials' identity",
    ),
]
ReasonOpt = Annotated[str, typer.Option(help="why (recorded in the audit)")]
RequiredReasonOpt = Annotated[str, typer.Option(help="why (required: it goes into the audit trail)")]
SiteFilterOpt = Annotated[str | None, typer.Option(help="only this site")]
InputFileOpt = Annotated[
    Path | None,
    typer.Option("--input-file", help="a corrected input (JSON; for import, the WXR file) replacing the failed one"),
]


def parse_params(input_file: Path | None, params: list[str], kind: str | None = None) -> tuple[dict[str, Any], int]:
    """The operation input from a JSON file and/or k=v pairs (pairs win); also its raw size. A pair's value is a string,
    or a number where the kind's schema states an integer (`--param due_minute=29433600`)."""
    data: dict[str, Any] = {}
    size = 0
    if input_file is not None:
        try:
            raw = input_file.read_bytes()
        except OSError as exc:
            raise InvalidInput(f"cannot read {input_file}: {exc.strerror}", field="input-file") from None
        size = len(raw)
        try:
            loaded = jsonlib.loads(raw)
        except ValueError as exc:
            raise InvalidInput(f"{input_file} is not JSON: {exc}", field="input-file") from None
        if not isinstance(loaded, dict):
            raise InvalidInput(f"{input_file} must hold a JSON object", field="input-file")
        data.update(loaded)
    for pair in params:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--param takes KEY=VALUE, got {pair!r}", field="param")
        data[key] = _typed(kind, key, value)
    return data, size


def _typed(kind: str | None, key: str, value: str) -> Any:
    """`value` as the type the kind's schema states for `key`: the API takes input as typed JSON, a pair is text."""
    from sitedispatch.domain.schemas import SCHEMAS

    schema = next((model for k, model in SCHEMAS.items() if k.value == kind), None)
    field = schema.model_json_schema()["properties"].get(key, {}) if schema is not None else {}
    types = {field.get("type")} | {choice.get("type") for choice in field.get("anyOf", [])}
    if "integer" in types and value.lstrip("-").isdigit():
        return int(value)
    return value


def parse_age(text: str | None, name: str) -> float | None:
    """`90s`, `15m`, `2h`, `3d` (or plain seconds)."""
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        return float(number) * units[unit]
    except ValueError:
        raise InvalidInput(f"--{name} takes a duration like 90s, 15m, 2h or 3d, got {text!r}", field=name) from None
