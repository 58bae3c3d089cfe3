"""The demo's phases after the fleet: imports published, flow control refusing and superseding, a dead letter
recovered by its evidence's command, and a real WordPress site; each acts through the local API as a user would."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import Operation, Status
from sitedispatch.local.receiver import WebhookReceiver

IMPORT_SITES = 3
EXPORT_POSTS = 60  # the demo's WordPress export (generated, seeded): posts, with categories, tags and comments


def demo_export(workdir: Path) -> Path:
    """The WordPress export the demo imports, written for it (the same file every run: seeded)."""
    from sitedispatch.local.synthetic import write_wxr

    path = workdir / "demo-export.xml"
    write_wxr(path, posts=EXPORT_POSTS, seed=3)
    return path


class DemoApi:
    """The demo's two callers of the local HTTP API: the producer `demo` and an operator."""

    def __init__(self, url: str) -> None:
        from sitedispatch.client import ApiClient

        self.producer = ApiClient(url, identity="demo")
        self.operator = ApiClient(url, identity="operator")

    def submit(self, kind: str, site: str, params: dict[str, Any], key: str | None = None) -> Operation:
        from sitedispatch.client import operation_of

        headers = {"Idempotency-Key": key} if key else {}
        submitted = self.producer.call(
            "POST", "/operations", body={"kind": kind, "site_id": site, "params": params}, headers=headers
        )
        return operation_of(self.producer.call("GET", f"/operations/{submitted['operation_id']}"))


def import_phase(
    deps: Dependencies, api: DemoApi, console: Console, sites: list[str], source: Path, timeout_s: float
) -> list[dict[str, Any]]:
    """Import a WordPress export into a few sites at once and wait for each to be live."""
    console.print(f"importing {source.name} into {len(sites)} sites at once, then publishing every route")
    started = time.time()
    ops = {
        site: api.submit("import", site, api.producer.upload(site, source), f"import-{site}").operation_id
        for site in sites
    }
    deadline = time.monotonic() + timeout_s
    results: dict[str, dict[str, Any]] = {}
    while len(results) < len(sites) and time.monotonic() < deadline:
        for site, op_id in ops.items():
            if site in results:
                continue
            op = deps.operations.get(op_id)
            record = deps.sites.get(site)
            if op is None or record is None or not op.status.terminal:
                continue
            seq = op.result.get("publication", {}).get("seq")
            if op.status != Status.SUCCEEDED or (seq and record.live_seq >= seq):
                receipt = _receipt(deps, site, record.live_revision)
                results[site] = {
                    "site": site,
                    "status": op.status.value,
                    "published": bool(seq) and record.live_seq >= seq,
                    "routes": receipt.get("route_count", 0),
                    "bytes": receipt.get("bytes", 0),
                    "live_after_s": round(time.time() - started, 2),
                    "posts": _imported_posts(deps, op_id),
                }
        time.sleep(0.2)
    return [
        results.get(
            site,
            {
                "site": site,
                "status": "timed out",
                "published": False,
                "routes": 0,
                "bytes": 0,
                "live_after_s": None,
                "posts": 0,
            },
        )
        for site in sites
    ]


def flow_control_phase(
    deps: Dependencies, api: DemoApi, console: Console, site: str, timeout_s: float
) -> dict[str, Any]:
    """Backpressure and supersession, visibly: hold a site, queue publishes past its limit, release it."""
    from sitedispatch.domain.errors import Backpressure

    console.print(
        f"[bold]flow control[/]: {site} paused; publishes queued until its limit "
        f"({deps.settings.max_queued_per_site}) is reached"
    )
    api.operator.call("POST", f"/sites/{site}/pause", body={"reason": "demo: holding the queue"})
    accepted: list[str] = []
    refusal = None
    for n in range(deps.settings.max_queued_per_site + 1):
        try:
            accepted.append(api.submit("publish", site, {}, f"publish-{n}").operation_id)
        except Backpressure as error:
            refusal = error
            console.print(f"  refused (429, exit 75 in the CLI): {error}")
    api.operator.call("POST", f"/sites/{site}/resume", body={"reason": "demo: releasing the queue"})
    console.print(f"  {site} resumed: the older queued publishes are superseded by the newest")
    deadline = time.monotonic() + timeout_s
    final = []
    while time.monotonic() < deadline:
        final = [deps.operations.get(op_id) for op_id in accepted]
        if all(op is not None and op.status.terminal for op in final):
            break
        time.sleep(0.2)
    statuses = [op.status.value if op else "missing" for op in final]
    for op_id, status in zip(accepted, statuses, strict=True):
        console.print(f"  {op_id}  {status}")
    return {
        "accepted": len(accepted),
        "refused": refusal is not None,
        "retry_after_s": refusal.retry_after_s if refusal else None,
        "superseded": statuses.count("superseded"),
        "succeeded": statuses.count("succeeded"),
    }


def dead_letter_phase(
    deps: Dependencies, api: DemoApi, console: Console, site: str, workdir: Path, timeout_s: float
) -> dict[str, Any]:
    """A poisoned input goes dead with evidence; the evidence's recovery command, with the file fixed, completes it."""
    from sitedispatch.local.synthetic import write_wxr

    good = workdir / "export.xml"
    write_wxr(good, posts=20, seed=11)
    broken = workdir / "export-truncated.xml"
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # an export cut off half way
    console.print(f"[bold]dead letters[/]: importing a truncated WXR export into {site}")
    op_id = api.submit("import", site, api.producer.upload(site, broken), f"import-{site}").operation_id
    op = wait_terminal(deps, op_id, timeout_s)
    if op is None or op.status != Status.DEAD:
        return {"operation_id": op_id, "dead": False, "recovered": False}
    evidence = api.operator.call("GET", f"/dead-letters/{op_id}")
    console.print(
        f"  {op_id} is dead after {evidence['attempt']} attempt: {evidence['error_code']}: {evidence['error_message']}"
    )
    console.print(
        f"  evidence: s3://{deps.settings.bucket}/{evidence['key']} (input digest "
        f"{evidence['input_digest'][:12]}…, traceback digest {evidence['traceback_digest']})"
    )
    console.print(f"  recovery: [bold]{evidence['recovery_command']}[/]")
    fixed = api.operator.upload(site, good)
    report = api.operator.call(
        "POST",
        "/dead-letters/redrive",
        body={"operation_id": op_id, "input": fixed, "reason": "demo: re-exported the file"},
    )
    console.print(f"  redriven with the complete export ({report['dlq_messages_removed']} DLQ message removed)")
    final = wait_terminal(deps, op_id, timeout_s)
    recovered = final is not None and final.status == Status.SUCCEEDED
    audit = api.operator.call("GET", "/audit", query={"target": op_id, "since_s": 3600})
    console.print(
        f"  {op_id}: {final.status.value if final else 'missing'} in epoch {final.epoch if final else '?'}"
        f"; audit: {[e['action'] + ':' + e['outcome'] for e in audit]}"
    )
    return {
        "operation_id": op_id,
        "dead": True,
        "error_code": evidence["error_code"],
        "recovery_command": evidence["recovery_command"],
        "recovered": recovered,
        "dlq_messages_removed": report["dlq_messages_removed"],
    }


def wordpress_phase(
    deps: Dependencies,
    api: DemoApi,
    console: Console,
    workdir: Path,
    export: Path,
    timeout_s: float,
    wanted: bool | None,
) -> dict[str, Any]:
    """A real WordPress (Debian's packages): registered, provisioned, the demo's export imported through REST, then
    crawled into a publication."""
    from sitedispatch.domain.model import WORDPRESS_DRIVER
    from sitedispatch.local.wordpress import PACKAGES, LocalWordPress, missing_programs

    missing = missing_programs()
    if wanted is False or (wanted is None and missing):
        reason = "not asked for" if wanted is False else f"needs apt-get install {' '.join(PACKAGES)}"
        console.print(f"[dim]real WordPress site: skipped ({reason})[/]")
        return {"skipped": reason}
    site_id = "demo-wordpress"
    with LocalWordPress(workdir / "wordpress") as wordpress:
        wordpress.start_database()
        site = wordpress.add_site(site_id, title="Demo WordPress")
        console.print(
            f"[bold]a real WordPress[/] at {site.url} (MariaDB + php -S, the sitedispatch mu-plugin), "
            f"registered with driver wordpress"
        )
        registration = {
            "site_id": site_id,
            "driver": WORDPRESS_DRIVER,
            "url": site.url,
            "credential": site.credential_ref,
        }
        api.producer.call("POST", "/sites", body=registration)
        result: dict[str, Any] = {"url": site.url}
        for kind, params in (
            ("provision", {"title": "Demo WordPress", "admin_email": "admin@demo.example"}),
            ("import", api.producer.upload(site_id, export)),
        ):
            started = time.monotonic()
            op = api.submit(kind, site_id, params)
            done = wait_terminal(deps, op.operation_id, timeout_s * 2)
            took = time.monotonic() - started
            commit = deps.commits.get(op.operation_id)
            result[kind] = {
                "status": done.status.value if done else "missing",
                "seconds": round(took, 1),
                "summary": commit.summary if commit else None,
            }
            console.print(
                f"  {kind}: {result[kind]['status']} in {took:.1f}s"
                + (
                    f" (attempt {done.attempt if done else '?'}); created {commit.summary.get('created')}, "
                    f"found {commit.summary.get('existing')}"
                    if commit and kind == "import"
                    else ""
                )
            )
        head = deps.sites.get(site_id)
        version = head.head_version if head else 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and (
            (record := deps.sites.get(site_id)) is None or record.live_seq < version
        ):
            time.sleep(0.5)
        record = deps.sites.get(site_id)
        receipt = _receipt(deps, site_id, record.live_revision if record else None)
        result["published"] = bool(record and record.live_seq >= version and receipt)
        result["crawled_routes"] = receipt.get("route_count", 0)
        console.print(
            f"  publication {record.live_seq if record else '?'} live: {result['crawled_routes']} routes "
            f"crawled from WordPress; read one: sitedispatch sites read {site_id} /sample-page/"
        )
    return result


def wait_terminal(deps: Dependencies, op_id: str, timeout_s: float) -> Operation | None:
    deadline = time.monotonic() + timeout_s
    op = deps.operations.get(op_id)
    while (op is None or not op.status.terminal) and time.monotonic() < deadline:
        time.sleep(0.2)
        op = deps.operations.get(op_id)
    return op


def _imported_posts(deps: Dependencies, operation_id: str) -> int:
    """The site's posts after an import (from its commit's summary); 0 for an operation that committed nothing."""
    commit = deps.commits.get(operation_id)
    return int(commit.summary.get("totals", {}).get("posts", 0)) if commit is not None else 0


def _receipt(deps: Dependencies, site: str, revision: str | None) -> dict[str, Any]:
    from sitedispatch.publication.live import receipt_key

    if revision is None:
        return {}
    return dict(json.loads(deps.blobs.get(receipt_key(site, revision))))


def report_imports(console: Console, imports: list[dict[str, Any]]) -> None:
    table = Table(title="import + publication: every route of a site rendered in parallel")
    for column in ("site", "status", "posts", "routes live", "bytes", "live after (s)", "cron: one route/minute"):
        table.add_column(column)
    for i in imports:
        table.add_row(
            i["site"],
            i["status"],
            str(i["posts"]),
            str(i["routes"]),
            str(i["bytes"]),
            str(i["live_after_s"]),
            f"{i['routes']} min",
            style="green" if i["published"] else "red",
        )
    console.print(table)


def events_phase(api: DemoApi, console: Console, ops: list[Operation], timeout_s: float) -> dict[str, Any]:
    """The producer is told, not polled: its feed, read from the start following the cursor, holds each
    provision's end."""
    wanted = {op.operation_id for op in ops}
    told: set[str] = set()
    feed: list[dict[str, Any]] = []
    after, deadline = 0, time.monotonic() + timeout_s
    while told != wanted and time.monotonic() < deadline:
        page = api.producer.call("GET", "/events", query={"after": after, "wait_s": 2, "limit": 100})
        feed += page["events"]
        told |= {str(e["operation_id"]) for e in page["events"] if e["type"] == "operation.succeeded"} & wanted
        after = page["after"]
    types = Counter(str(e["type"]) for e in feed)
    console.print(
        f"events: the producer's feed told {len(told)} of {len(wanted)} provisions' ends; {len(feed)} events in all: "
        + ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
    )
    return {"told": len(told), "missing": sorted(wanted - told), "feed_events": len(feed), "by_type": dict(types)}


def register_webhook(api: DemoApi, receiver: WebhookReceiver, url: str) -> str:
    """The producer's endpoint for its provisions' ends, on a receiver that checks every signature."""
    created = api.producer.call("POST", "/webhooks", body={"url": url, "types": ["operation.succeeded"]})
    receiver.secrets = [created["secret"]]
    return str(created["endpoint"]["endpoint_id"])


def webhooks_phase(
    api: DemoApi, console: Console, receiver: WebhookReceiver, endpoint_id: str, ops: list[Operation], timeout_s: float
) -> dict[str, Any]:
    """The producer's receiver got a signed POST for each provision's end (its signature checked by the
    standardwebhooks package, not by sitedispatch)."""
    wanted = {op.operation_id for op in ops}
    deadline = time.monotonic() + timeout_s

    def told() -> set[str]:
        return {str(r.data.get("operation_id")) for r in receiver.accepted() if r.verified} & wanted

    while told() != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    verified = all(r.verified for r in receiver.received)
    endpoint = api.producer.call("GET", f"/webhooks/{endpoint_id}")
    console.print(
        f"webhooks: the producer's receiver got {len(told())} of {len(wanted)} provisions' ends as signed POSTs "
        f"({len(receiver.received)} deliveries, every signature {'valid' if verified else 'NOT valid'}; the "
        f"endpoint is done up to feed place {endpoint['cursor']})"
    )
    return {
        "told": len(told()),
        "missing": sorted(wanted - told()),
        "deliveries": len(receiver.received),
        "all_verified": verified,
    }
