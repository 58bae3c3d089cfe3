"""`sitedispatch submit --batch FILE.jsonl`: many operations, a request of up to 500 items at a time.

Each line of the file is one operation: `{"kind": ..., "site_id": ..., "params": {...}, "idempotency_key": ...,
"tenant": ...}` (`idempotency_key` required: running the same file again names the same operations). Every item is
answered as a single submit would be; the summary counts them, and lists the refused ones.
"""

from __future__ import annotations

import json as jsonlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sitedispatch.client import ApiClient
from sitedispatch.domain.errors import InvalidInput

BATCH_ITEMS = 500  # the API's most items in one request
BATCH_BYTES = 200 * 1024  # a request's body stays well under the API's body limit


@dataclass
class BatchReport:
    accepted: int = 0
    existing: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)  # line, status, error body
    operations: list[str] = field(default_factory=list)  # of the lines answered with one, in the file's order
    lines: int = 0  # in the file
    answered: int = 0  # lines the API answered before the run ended (all of them, unless it was interrupted)

    @property
    def backpressured(self) -> list[dict[str, Any]]:
        return [r for r in self.refused if r["status"] == 429]


def read_items(path: Path) -> list[dict[str, Any]]:
    """The file's items; a line that is not a JSON object is refused with its number (nothing is sent)."""
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file", field="batch")
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = jsonlib.loads(line)
        except ValueError:
            raise InvalidInput(f"{path}:{number}: not a JSON object", field="batch") from None
        if not isinstance(item, dict):
            raise InvalidInput(f"{path}:{number}: not a JSON object", field="batch")
        items.append(item | {"_line": number})
    if not items:
        raise InvalidInput(f"{path}: no items", field="batch")
    return items


def requests_of(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The items in requests of at most BATCH_ITEMS and about BATCH_BYTES each, in order."""
    chunks: list[list[dict[str, Any]]] = [[]]
    size = 0
    for item in items:
        item_size = len(jsonlib.dumps(item))
        if chunks[-1] and (len(chunks[-1]) == BATCH_ITEMS or size + item_size > BATCH_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += item_size
    return chunks


def submit_file(api: ApiClient, path: Path, show_progress: bool) -> BatchReport:
    items = read_items(path)
    report = BatchReport(lines=len(items))
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("submitting"), BarColumn(), MofNCompleteColumn(), disable=not show_progress, transient=True
    ) as bar:
        task = bar.add_task("items", total=len(items))
        try:
            for chunk in requests_of(items):
                body = {"items": [{k: v for k, v in item.items() if k != "_line"} for item in chunk]}
                answer = api.call("POST", "/operations/batch", body=body)
                for item, result in zip(chunk, answer["items"], strict=True):
                    if result["status"] in (200, 202):
                        report.operations.append(result["operation"]["operation_id"])
                        if result["status"] == 202:
                            report.accepted += 1
                        else:
                            report.existing += 1
                    else:
                        report.refused.append({"line": item["_line"], "status": result["status"], **result["error"]})
                report.answered += len(chunk)
                bar.advance(task, len(chunk))
        except KeyboardInterrupt:  # Ctrl-C: what was answered is reported (a request cut short may have landed too)
            pass
    return report
