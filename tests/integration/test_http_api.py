"""The HTTP API as a client meets it: real HTTP to the local gateway in front of the API function, against moto.

Status codes table-driven over routes; tenant confinement on every read and action route; Retry-After on 429; the
idempotent submit; uploads bound to their caller and digest; the caller from the verified request context only."""

from __future__ import annotations

import hashlib
import io
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import urllib3

from sitedispatch.api.app import OPERATOR_ROUTES, routes
from tests.conftest import Cloud, local_api, pump, registered
from tests.integration.conftest import as_

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wxr"
PROVISION = {"title": "Acme", "admin_email": "a@acme.example"}


def provisioned(url: str, cloud: Cloud, site: str, who: str = "tenant-a") -> str:
    reply = as_(url, who).request(
        "POST", "/operations", body={"kind": "provision", "site_id": site, "params": PROVISION}
    )
    assert reply.status == 202, reply
    pump(cloud)
    return str(reply.body["operation_id"])


def dead_import(url: str, cloud: Cloud, site: str, who: str = "tenant-a") -> str:
    client = as_(url, who)
    params = client.upload(site, FIXTURES / "malformed.xml")
    reply = client.request("POST", "/operations", body={"kind": "import", "site_id": site, "params": params})
    assert reply.status == 202, reply
    pump(cloud)
    return str(reply.body["operation_id"])


def test_submit_is_202_with_location_then_200_for_the_same_and_409_for_another_input(api: str) -> None:
    client = as_(api, "tenant-a")
    body = {"kind": "provision", "site_id": "acme-blog", "params": PROVISION}
    first = client.request("POST", "/operations", body=body, headers={"Idempotency-Key": "k1"})
    assert first.status == 202 and first.body["created"] is True
    assert first.headers["Location"] == f"/operations/{first.body['operation_id']}"
    again = client.request("POST", "/operations", body=body, headers={"Idempotency-Key": "k1"})
    assert again.status == 200 and again.body["operation_id"] == first.body["operation_id"]
    assert again.body["created"] is False and "Location" not in again.headers
    other = {**body, "params": {**PROVISION, "title": "Other"}}
    conflict = client.request("POST", "/operations", body=other, headers={"Idempotency-Key": "k1"})
    assert conflict.status == 409 and conflict.body["error"] == "idempotency_conflict"


def test_concurrent_requests_are_each_their_own(api: str, cloud: Cloud) -> None:
    """Requests served at once (a burst of submits for different sites) never read each other's bodies."""
    from concurrent.futures import ThreadPoolExecutor

    client = as_(api, "tenant-a")
    sites = [f"burst-{n:02d}" for n in range(12)]
    with ThreadPoolExecutor(12) as pool:
        replies = list(
            pool.map(
                lambda site: client.request(
                    "POST", "/operations", body={"kind": "provision", "site_id": site, "params": PROVISION}
                ),
                sites,
            )
        )
    assert [r.status for r in replies] == [202] * 12
    assert [r.body["site_id"] for r in replies] == sites and len({r.body["operation_id"] for r in replies}) == 12


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("POST", "/operations", {"kind": "teleport", "site_id": "acme-blog"}, 422, "kind"),
        ("POST", "/operations", {"kind": "provision", "site_id": "Bad_Site", "params": PROVISION}, 422, "site"),
        (
            "POST",
            "/operations",
            {"kind": "provision", "site_id": "acme-blog", "params": {"title": "x"}},
            422,
            "admin_email",
        ),
        ("POST", "/operations", {"kind": "provision", "site_id": "acme-blog", "surprise": 1}, 422, "surprise"),
        ("POST", "/operations", {"site_id": "acme-blog"}, 422, "kind"),
        ("GET", "/operations?limit=0", None, 422, "limit"),
        # a number's text and nothing around it (the fuzzer found "6\x0b" read as 6; Python's int() strips it)
        ("GET", "/operations?limit=6%0B", None, 422, "limit"),
        ("GET", "/operations?limit=%206", None, 422, "limit"),
        ("GET", "/operations?limit=6_0", None, 422, "limit"),
        ("GET", "/dead-letters?older_than_s=1%0B", None, 422, "older_than_s"),
        ("GET", "/audit?since_s=nan", None, 422, "since_s"),
        ("GET", "/operations?status=exploded", None, 422, "status"),
        ("GET", "/operations/op_missing/wait?timeout_s=60", None, 422, "timeout_s"),
        ("POST", "/sites", {"site_id": "wp-site", "driver": "wordpress"}, 422, "url"),
        ("POST", "/uploads", {"site_id": "acme-blog", "sha256": "nothex", "bytes": 10}, 422, "sha256"),
        ("POST", "/dead-letters/redrive", {"dry_run": True}, 422, "selection"),
        ("PUT", "/quotas", {"principal": "tenant-a", "reason": "r"}, 422, "max_outstanding"),
        # of the type the document states: pydantic's lax mode would have read `true` as 1 and "5" as 5
        ("PUT", "/quotas", {"principal": "tenant-a", "max_outstanding": True, "reason": "r"}, 422, "max_outstanding"),
        ("PUT", "/quotas", {"principal": "tenant-a", "max_outstanding": 2.5, "reason": "r"}, 422, "max_outstanding"),
        (
            "POST",
            "/operations",
            {"kind": "wp_cron", "site_id": "acme-blog", "params": {"due_minute": "5"}},
            422,
            "due_minute",
        ),
        ("POST", "/reconcile", {"schedule": "sometimes"}, 422, "schedule"),
        ("GET", "/operations/op_missing", None, 404, None),
        ("GET", "/sites/no-such-site", None, 404, None),
        ("GET", "/sites/no-such-site/history", None, 404, None),
        ("GET", "/sites/no-such-site/live", None, 404, None),
        ("POST", "/sites/no-such-site/pause", {}, 404, None),
        ("GET", "/dead-letters/op_missing", None, 404, None),
        ("POST", "/operations/op_missing/cancel", {}, 404, None),
        ("GET", "/dead-letters?site_id=", None, 422, "site_id"),  # an empty value is a value, and invalid
        ("GET", "/operations?site_id=Not%20A%20Site", None, 422, "site_id"),
        ("GET", "/quotas?principal=", None, 422, "principal"),
        ("DELETE", "/quotas?principal=tenant-a", None, 422, "reason"),
        ("DELETE", "/quotas?principal=tenant-a&reason=%20%E3%80%80", None, 422, "reason"),  # blank is no reason
        ("PUT", "/quotas", {"principal": "tenant-a", "max_running": 1, "reason": "\ufeff"}, 422, "reason"),
        ("POST", "/operations", [{"kind": "publish", "site_id": "acme-blog"}], 422, "body"),  # an array
        ("POST", "/dead-letters/redrive", {"site_id": "acme-blog", "input": {}}, 422, "input"),
        (
            "POST",
            "/sites",
            {"site_id": "wp-site", "url": "https://h.example/\x1e", "credential": "file:///c"},
            422,
            "url",
        ),
    ],
)
def test_errors_name_the_field_and_share_one_body(
    api: str, method: str, path: str, body: Any, status: int, field: str | None
) -> None:
    who = "operator" if path in ("/quotas", "/reconcile") else "tenant-a"
    base, _, query = path.partition("?")
    reply = as_(api, who).request(method, base + (f"?{query}" if query else ""), body=body)
    assert reply.status == status, reply
    assert set(reply.body) <= {"error", "message", "field"} and reply.body["error"] and reply.body["message"]
    assert reply.body.get("field") == field, reply.body


def test_a_body_that_is_not_json_is_400_and_an_oversized_one_413(api: str, cloud: Cloud) -> None:
    http = urllib3.PoolManager()
    headers = {"X-Sitedispatch-As": "tenant-a", "Content-Type": "application/json"}
    reply = http.request("POST", f"{api}/operations", body=b"{not json", headers=headers)
    assert reply.status == 400 and json.loads(reply.data)["field"] == "body"
    limit = cloud.settings.max_input_bytes + 16 * 1024
    huge = json.dumps({"kind": "provision", "site_id": "acme-blog", "params": {"title": "x" * limit}})
    reply = http.request("POST", f"{api}/operations", body=huge.encode(), headers=headers)
    assert reply.status == 413 and json.loads(reply.data)["error"] == "too_large"
    assert cloud.deps.operations.list() == []  # nothing written


def test_bodies_that_are_not_utf8_json_are_refused_before_anything_parses_them(api: str, cloud: Cloud) -> None:
    http = urllib3.PoolManager()
    who = {"X-Sitedispatch-As": "tenant-a"}
    for path in ("/operations", "/uploads", "/sites/acme-blog/pause", "/operations/op_x/cancel", "/reconcile"):
        reply = http.request(
            "POST", f"{api}{path}", body=b"\xff\xfe{", headers={**who, "Content-Type": "application/json"}
        )
        assert reply.status == 400 and json.loads(reply.data) == {
            "error": "not_json",
            "message": "the body is not a JSON document (it is not UTF-8 text)",
            "field": "body",
        }, (path, reply.data)
        declared = http.request(
            "POST", f"{api}{path}", body=b"{}", headers={**who, "Content-Type": "multipart/form-data"}
        )
        assert declared.status == 415 and json.loads(declared.data)["field"] == "content-type"
    assert cloud.deps.operations.list() == []


def test_a_method_or_path_no_route_declares_is_answered_as_api_gateway_answers_it(api: str) -> None:
    """API Gateway's HTTP API answers 404 {"message":"Not Found"} itself, before authorization and any function."""
    http = urllib3.PoolManager()
    for method, path in (("TRACE", "/audit"), ("QUERY", "/operations/op_1"), ("PATCH", "/sites"), ("GET", "/nowhere")):
        for who in ({"X-Sitedispatch-As": "tenant-a"}, {}):
            reply = http.request(method, f"{api}{path}", headers=who)
            assert (reply.status, json.loads(reply.data)) == (404, {"message": "Not Found"}), (method, path)
    head = http.request("HEAD", f"{api}/status", headers={"X-Sitedispatch-As": "tenant-a"})
    assert head.status == 404 and head.data == b""


class SlowStream(io.StringIO):
    """As a pipe whose reader is busy: each write blocks a moment, and other threads run meanwhile."""

    def write(self, text: str) -> int:
        time.sleep(0.001)
        return super().write(text)


def test_the_access_log_is_one_json_document_per_line_however_many_requests_arrive_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gateway answers on many threads; the demo's api.log once held two requests' lines on one line."""
    from sitedispatch.local.gateway import running_gateway

    sink = SlowStream()
    monkeypatch.setattr("sys.stdout", sink)  # the gateway logs to the stdout it starts with
    with running_gateway(invoke=lambda event: {"statusCode": 200, "body": "{}"}) as url:
        monkeypatch.undo()
        http = urllib3.PoolManager(maxsize=16)

        def ask(i: int) -> int:
            return http.request("GET", f"{url}/status?n={i}", headers={"X-Sitedispatch-As": "tenant-a"}).status

        with ThreadPoolExecutor(16) as pool:
            assert set(pool.map(ask, range(400))) == {200}
    lines = sink.getvalue().splitlines()
    assert len(lines) == 400 and all(json.loads(line)["message"] == "request" for line in lines)


def test_an_unsigned_request_is_refused_before_the_function(api: str) -> None:
    reply = urllib3.PoolManager().request("GET", f"{api}/status")
    assert reply.status == 403 and "X-Sitedispatch-As" in json.loads(reply.data)["message"]


def test_429_carries_retry_after_and_the_limit(cloud: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SITEDISPATCH_MAX_QUEUED_PER_SITE", "2")
    registered(cloud, "busy-site", "tenant-a")
    with local_api() as url:
        client = as_(url, "tenant-a")
        replies = [
            client.request("POST", "/operations", body={"kind": "publish", "site_id": "busy-site", "params": {}})
            for _ in range(4)
        ]
    assert [r.status for r in replies] == [202, 202, 429, 429]
    for reply in replies[2:]:
        assert int(reply.headers["Retry-After"]) >= 1
        assert reply.body["error"] == "backpressure" and reply.body["limit"] == "site" and reply.body["maximum"] == 2
        assert reply.body["value"] == 2 and reply.body["retry_after_s"] > 0 and reply.body["estimated_delay_s"] >= 0
        assert int(reply.headers["Retry-After"]) >= reply.body["retry_after_s"]


def test_a_paused_sites_work_says_paused_not_an_estimate(api: str, cloud: Cloud) -> None:
    provisioned(api, cloud, "held-site")
    client = as_(api, "tenant-a")
    client.call("POST", "/sites/held-site/pause", body={"reason": "maintenance window"})
    op = client.call("POST", "/operations", body={"kind": "publish", "site_id": "held-site", "params": {}})
    detail = client.call("GET", f"/operations/{op['operation_id']}")
    assert detail["waiting_because"] == "paused: maintenance window" and detail["estimated_delay_s"] is None
    [row] = [d for d in client.call("GET", "/status")["delay_by_site"] if d["site_id"] == "held-site"]
    assert row["paused"] == "paused: maintenance window" and row["estimated_delay_s"] is None


@pytest.mark.guarantee
def test_a_resumed_sites_queued_work_starts_at_once_not_at_the_end_of_the_pauses_deferral(
    api: str, cloud: Cloud
) -> None:
    import time

    provisioned(api, cloud, "held-site")
    client = as_(api, "tenant-a")
    client.call("POST", "/sites/held-site/pause", body={"reason": "maintenance window"})
    op_id = client.call("POST", "/operations", body={"kind": "publish", "site_id": "held-site", "params": {}})[
        "operation_id"
    ]
    pump(cloud)  # delivered while paused: deferred for the pause's deferral (300 s), its receipt held
    assert client.call("GET", f"/operations/{op_id}")["status"] == "queued"
    assert [d.operation_id for d in cloud.deps.sites.take_held("nobody-site")] == []

    client.call("POST", "/sites/held-site/resume", body={})
    resumed = time.monotonic()
    pump(cloud)  # the resume made it visible: received again now

    assert client.call("GET", f"/operations/{op_id}")["status"] == "succeeded"
    assert time.monotonic() - resumed < 5
    [entry] = client.call("GET", "/audit", query={"action": "resume", "target": "held-site"})
    assert entry["detail"]["woken"] == 1


def test_work_for_a_site_never_registered_is_a_404_in_one_line_and_creates_no_site(api: str, cloud: Cloud) -> None:
    client = as_(api, "tenant-a")
    reply = client.request("POST", "/operations", body={"kind": "publish", "site_id": "acme-blgo", "params": {}})
    assert reply.status == 404 and reply.body["error"] == "not_found", reply
    assert "site acme-blgo is not registered" in reply.body["message"] and "\n" not in reply.body["message"]
    assert cloud.deps.sites.get("acme-blgo") is None
    assert client.request("GET", "/sites/acme-blgo").status == 404


def test_the_long_poll_returns_when_the_operation_ends_or_at_its_timeout(api: str, cloud: Cloud) -> None:
    import threading
    import time

    client = as_(api, "tenant-a")
    op_id = client.call("POST", "/operations", body={"kind": "provision", "site_id": "poll-site", "params": PROVISION})[
        "operation_id"
    ]
    started = time.monotonic()
    waiting = client.call("GET", f"/operations/{op_id}/wait", query={"timeout_s": 0.6})
    assert waiting["status"] == "queued" and 0.5 <= time.monotonic() - started < 5
    timer = threading.Timer(0.5, pump, args=(cloud,))
    timer.start()
    try:
        started = time.monotonic()
        done = client.call("GET", f"/operations/{op_id}/wait", query={"timeout_s": 15})
    finally:
        timer.join()
    assert done["status"] == "succeeded" and time.monotonic() - started < 10


def test_a_principal_gets_nothing_of_another_principals_on_any_route(api: str, cloud: Cloud) -> None:
    provisioned(api, cloud, "a-site")
    dead = dead_import(api, cloud, "a-site")
    b = as_(api, "tenant-b")
    hook = as_(api, "tenant-a").call("POST", "/webhooks", body={"url": "http://127.0.0.1:9/hook"})
    endpoint_id = hook["endpoint"]["endpoint_id"]
    on_a = {"dependencies": ["db:a-shared"], "reason": "its cluster"}
    as_(api, "tenant-a").call("PUT", "/sites/a-site/dependencies", body=on_a)
    ids = {"operation_id": dead, "site_id": "a-site", "endpoint_id": endpoint_id, "dependency_id": "db:a-shared"}
    missing_ids = {
        "operation_id": "op_" + "0" * 32,
        "site_id": "zz-site",
        "endpoint_id": "whk_" + "0" * 24,
        "dependency_id": "db:zz",
    }
    bodies: dict[str, dict[str, Any]] = {  # valid bodies: the id is what is refused
        "/webhooks/{endpoint_id}/redeliver": {"from_seq": 1},
        "/sites/{site_id}/dependencies": {"dependencies": [], "reason": "r"},
    }
    queries = {("DELETE", "/sites/{site_id}"): {"reason": "r"}}  # a valid query, likewise
    checked = set()
    for method, path in routes():
        if (method, path) in OPERATOR_ROUTES:
            reply = b.request(method, path, body={"principal": "tenant-a", "max_running": 1, "reason": "r"})
            assert reply.status in (403, 422), (method, path, reply)  # an operator's action: forbidden outright
            checked.add((method, path))
            continue
        if "{" not in path:
            continue
        concrete, missing = path.format(**ids), path.format(**missing_ids)
        body: dict[str, Any] | None = bodies.get(path, {}) if method in ("POST", "PUT") else None
        query = queries.get((method, path))
        theirs = b.request(method, concrete, body=body, query=query)
        absent = b.request(method, missing, body=body, query=query)
        assert theirs.status == absent.status == 404, (method, path, theirs, absent)
        said = absent.body["message"]
        for name, value in missing_ids.items():
            said = said.replace(value, ids[name])
        assert theirs.body["message"] == said, (method, path)
        checked.add((method, path))
    # the listing routes show B nothing of A's
    assert b.call("GET", "/operations") == [] and b.call("GET", "/dead-letters") == []
    assert b.request("GET", "/operations", query={"site_id": "a-site"}).status == 404
    assert all(e["actor"] == "tenant-b" for e in b.call("GET", "/audit"))
    assert b.request("GET", "/audit", query={"actor": "tenant-a"}).status == 403
    status = b.call("GET", "/status")
    assert status["backlog_by_principal"] in ({}, {"tenant-b": 0}) and status["delay_by_site"] == []
    assert b.request("GET", "/quotas", query={"principal": "tenant-a"}).status == 403
    assert b.call("POST", "/dead-letters/redrive", body={"all": True})["selected"] == []
    assert b.call("GET", "/webhooks") == {"endpoints": []}
    assert b.call("GET", "/dependencies") == []
    taken = b.request("POST", "/sites", body={"site_id": "a-site", "driver": "reference"})
    assert taken.status == 409  # site ids are one namespace: taken, whoever holds it
    assert {r for r in routes() if "{" in r[1]} <= checked
    # and A's operation is untouched, with B's attempts audited as denied
    a = as_(api, "tenant-a")
    assert a.call("GET", f"/operations/{dead}")["status"] == "dead"
    denied = [e for e in as_(api, "operator").call("GET", "/audit") if e["outcome"] == "denied"]
    assert denied and {e["actor"] for e in denied} == {"tenant-b"}


def test_an_operator_sees_and_acts_on_everything(api: str, cloud: Cloud) -> None:
    provisioned(api, cloud, "a-site")
    dead = dead_import(api, cloud, "a-site")
    ops = as_(api, "operator")
    assert ops.call("GET", f"/operations/{dead}")["principal"] == "tenant-a"
    assert [d["operation_id"] for d in ops.call("GET", "/dead-letters")] == [dead]
    assert ops.call("POST", "/dead-letters/redrive", body={"operation_id": dead, "dry_run": True})["selected"] == [dead]
    limits = ops.call("PUT", "/quotas", body={"principal": "tenant-a", "max_running": 3, "reason": "calm"})
    assert limits["max_running"] == 3
    assert ops.call("DELETE", "/quotas", query={"principal": "tenant-a", "reason": "done"})["quota"] is None
    assert ops.call("POST", "/reconcile", body={"schedule": "reconcile"})["schedule"] == "reconcile"


def test_uploads_are_bound_to_their_caller_and_digest(api: str, cloud: Cloud, tmp_path: Path) -> None:
    provisioned(api, cloud, "a-site")
    a, b = as_(api, "tenant-a"), as_(api, "tenant-b")
    params = a.upload("a-site", FIXTURES / "fixture-1.2.xml")
    again = a.call(
        "POST",
        "/uploads",
        body={"site_id": "a-site", "sha256": params["source_digest"], "bytes": params["source_bytes"]},
    )
    assert again["present"] is True and again["upload"] is None  # the same file is not sent twice
    before = len(cloud.deps.operations.list())

    # B names A's upload: refused before anything is written
    refused = b.request("POST", "/operations", body={"kind": "import", "site_id": "a-site", "params": params})
    assert refused.status in (404, 409, 422), refused
    # A declares one digest and sends another body: S3 (the local cloud as S3 does) refuses the PUT
    body = (FIXTURES / "fixture-1.2.xml").read_bytes()
    wrong = hashlib.sha256(b"another file").hexdigest()
    grant = a.call("POST", "/uploads", body={"site_id": "a-site", "sha256": wrong, "bytes": len(body)})
    put = urllib3.PoolManager().request("PUT", grant["upload"]["url"], body=body, headers=grant["upload"]["headers"])
    assert put.status == 400 and b"BadDigest" in put.data
    # and an import naming the never-completed upload is refused
    declared = grant["import_params"]
    refused = a.request("POST", "/operations", body={"kind": "import", "site_id": "a-site", "params": declared})
    assert refused.status == 409 and "PUT the file" in refused.body["message"]
    assert len(cloud.deps.operations.list()) == before

    accepted = a.request("POST", "/operations", body={"kind": "import", "site_id": "a-site", "params": params})
    assert accepted.status == 202
    pump(cloud)
    assert a.call("GET", f"/operations/{accepted.body['operation_id']}")["status"] == "succeeded"


def test_the_caller_is_the_verified_identity_never_the_request(cloud: Cloud) -> None:
    """On AWS API Gateway puts the SigV4-verified ARN into the request context; the function reads nothing else
    (an X-Sitedispatch-As header is ignored), and an assumed role is one principal across sessions."""
    import sitedispatch.functions.api as api
    from sitedispatch.local.esm import LambdaContext
    from sitedispatch.local.gateway import http_api_event
    from tests.conftest import fresh_functions

    fresh_functions()
    session = "arn:aws:sts::123456789012:assumed-role/Producer/i-0abc"
    body = json.dumps({"kind": "provision", "site_id": "arn-site", "params": PROVISION}).encode()
    event = http_api_event("POST", "/operations", {"x-sitedispatch-as": "operator"}, body, session)
    response = api.handler(event, LambdaContext("Api", 29, 512, "us-east-1", 0.0))
    assert response["statusCode"] == 202
    op = cloud.deps.operations.get(json.loads(response["body"])["operation_id"])
    assert op is not None and op.principal == "arn:aws:sts::123456789012:assumed-role/Producer"
    unsigned = http_api_event("GET", "/status", {"x-sitedispatch-as": "operator"}, b"", None)
    response = api.handler(unsigned, LambdaContext("Api", 29, 512, "us-east-1", 0.0))
    assert response["statusCode"] == 403 and json.loads(response["body"])["error"] == "forbidden"
    fresh_functions()


def test_a_batch_is_answered_item_by_item_with_the_status_a_single_submit_would_get(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SITEDISPATCH_MAX_QUEUED_PER_SITE", "2")
    registered(cloud, "busy-site", "control-plane")
    with local_api() as url:
        client = as_(url, "control-plane")
        item = {"kind": "wp_cron", "site_id": "busy-site", "params": {"due_minute": 1}, "tenant": "customer-1"}
        items = [
            {**item, "idempotency_key": "a"},
            {**item, "idempotency_key": "a"},  # the same again: 200
            {**item, "idempotency_key": "b"},
            {**item, "idempotency_key": "c"},  # the site's two places are taken: 429
            {**item, "kind": "teleport", "idempotency_key": "d"},  # 422, naming the field
            {**item, "params": {"due_minute": 2}, "idempotency_key": "a"},  # another input under a used key: 409
        ]
        reply = client.request("POST", "/operations/batch", body={"items": items})
        again = client.request("POST", "/operations/batch", body={"items": items[:3]})  # a retry: nothing new
        empty = client.request("POST", "/operations/batch", body={"items": []})
        keyless = client.request("POST", "/operations/batch", body={"items": [item]})
    assert reply.status == 200, reply
    answers = reply.body["items"]
    assert [a["status"] for a in answers] == [202, 200, 202, 429, 422, 409]
    assert (reply.body["accepted"], reply.body["existing"], reply.body["refused"]) == (2, 1, 3)
    assert answers[0]["operation"]["operation_id"] == answers[1]["operation"]["operation_id"]
    assert answers[3]["error"]["limit"] == "site" and answers[3]["error"]["retry_after_s"] > 0
    assert answers[4]["error"]["field"] == "kind" and answers[5]["error"]["error"] == "idempotency_conflict"
    assert [a["status"] for a in again.body["items"]] == [200, 200, 200]
    assert empty.status == 422 and keyless.status == 422 and keyless.body["field"] == "items.0.idempotency_key"
    ops = cloud.deps.operations.list(site_id="busy-site")
    assert len(ops) == 2 and {op.tenant for op in ops} == {"customer-1"}


def test_a_tenant_is_a_fairness_key_the_caller_names_and_its_quota_is_its_own(api: str, cloud: Cloud) -> None:
    client = as_(api, "control-plane")
    body = {"kind": "provision", "site_id": "cust-site", "params": PROVISION, "tenant": "customer-7"}
    reply = client.request("POST", "/operations", body=body)
    assert reply.status == 202
    op = client.call("GET", f"/operations/{reply.body['operation_id']}")
    assert (op["tenant"], op["principal"]) == ("customer-7", "control-plane")
    bad = client.request("POST", "/operations", body={**body, "tenant": "no spaces#"})
    assert bad.status == 422 and bad.body["field"] == "tenant"
    operator = as_(api, "operator")
    quota = {"principal": "control-plane", "tenant": "customer-7", "max_outstanding": 1, "reason": "trial"}
    assert operator.request("PUT", "/quotas", body={**quota, "max_outstanding": 1.0}).status == 200  # JSON's 1.0 is 1
    limits = client.call("GET", "/quotas", query={"tenant": "customer-7"})
    assert (limits["tenant"], limits["max_outstanding"], limits["outstanding"]) == ("customer-7", 1, 1)
    full = client.request("POST", "/operations", body={**body, "site_id": "cust-site-2"})
    assert full.status == 429 and full.body["limit"] == "tenant"
    other = client.request("POST", "/operations", body={**body, "site_id": "cust-site-3", "tenant": "customer-8"})
    assert other.status == 202  # another customer of the same caller
    assert as_(api, "control-plane").request("PUT", "/quotas", body=quota).status == 403
