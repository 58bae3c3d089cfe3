"""The operator console in a real browser (Debian's chromium through Playwright) against the local API on moto.

Every page renders, its numbers are the API's, it passes axe; pausing writes an audit entry naming the caller; a
redrive by error class shows the API's dry-run count and then empties the class; a reader is refused by the server
(not by a hidden button); a form posted from another origin is refused; the URL's token, the cookie, the Host check
and the Content-Security-Policy hold for raw HTTP too.

CI installs chromium (.ci/run) and sets SITEDISPATCH_REQUIRE_BROWSER=1, so these never skip there; on a machine
without it they skip with the command that installs it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3

from sitedispatch.client import ApiClient
from sitedispatch.console import running_console
from sitedispatch.console.server import COOKIE, ConsoleServer
from sitedispatch.local.cloud import LOCAL_READER
from tests.conftest import Cloud, pump, wait_for
from tests.integration.conftest import as_
from tests.unit.conftest import FIXTURES

CHROMIUM = os.environ.get("SITEDISPATCH_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = os.environ.get("SITEDISPATCH_CONSOLE_SCREENSHOTS")  # `make console-screenshots`: docs/console
PAGES = {
    "overview": "/",
    "sites": "/sites",
    "site": "/sites/acme-blog",
    "operations": "/operations",
    "operation": None,  # the dead import's page (its id is known once seeded)
    "dead-letters": "/dead-letters",
    "redrive": "/dead-letters/redrive?error_code=wxr_malformed",
    "audit": "/audit",
    "quotas": "/quotas",
    "dependencies": "/dependencies",
    "dependency": "/dependencies/db:acme",
    "events": "/events",
    "webhooks": "/webhooks",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("SITEDISPATCH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
        pytest.skip("no chromium: `apt-get install --no-install-recommends chromium` (as .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def seeded(cloud: Cloud, api: str) -> dict[str, Any]:
    """Three sites of two principals (one with two tenants), their provisioning done, and two imports of a
    malformed file dead with error class wxr_malformed."""
    a, b = as_(api, "tenant-a"), as_(api, "tenant-b")
    for client, site, tenant in ((a, "acme-blog", "shop-1"), (a, "acme-shop", "shop-2"), (b, "beta-news", None)):
        body = {"kind": "provision", "site_id": site, "params": {"title": "T", "admin_email": "a@b.co"}}
        client.call("POST", "/operations", body=body | ({"tenant": tenant} if tenant else {}))
    pump(cloud)
    dead = []
    for site in ("acme-blog", "acme-shop"):
        params = a.upload(site, FIXTURES / "malformed.xml")
        dead.append(a.call("POST", "/operations", body={"kind": "import", "site_id": site, "params": params}))
    pump(cloud)
    operator = as_(api, "operator")
    wait_for(lambda: len(operator.call("GET", "/dead-letters")) == 2, timeout_s=10, what="two dead letters listed")
    operator.call("POST", "/webhooks", body={"url": "http://127.0.0.1:9/hooks", "description": "ops pager"})
    a.call("PUT", "/sites/acme-blog/dependencies", body={"dependencies": ["db:acme"], "reason": "its cluster"})
    operator.call(
        "PUT",
        "/dependencies/db:acme",
        body={"max_running": 4, "rates": [{"limit": 20, "period_s": 60}], "reason": "4 writers"},
    )
    return {"api": api, "operator": operator, "dead": [op["operation_id"] for op in dead]}


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A browser profile of its own for each test, closed with it (no page of one test polls during the next)."""
    profile = browser.new_context()
    try:
        yield profile
    finally:
        profile.close()


def open_console(context: Any, server: ConsoleServer) -> Any:
    page = context.new_page()
    page.goto(server.gate.url)
    return page


def number(page: Any, selector: str) -> int:
    return int(page.locator(selector).first.inner_text().strip())


def serious_violations(page: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']}"
        for v in results.response["violations"]
        if v.get("impact") in ("serious", "critical")
    ]


def check_overview(page: Any, api: ApiClient) -> None:
    page.wait_for_selector(".uplot", timeout=5000)  # the chart drew (uPlot ran under the CSP)
    status = api.call("GET", "/status")
    for queue in status["queues"]:
        row = f'tr[data-queue="{queue["queue"]}"]'
        assert number(page, f'{row} [data-field="visible"]') == queue["visible"]
        assert number(page, f'{row} [data-field="dlq_depth"]') == queue["dlq_depth"]
    for name, count in status["backlog_by_status"].items():
        assert number(page, f'[data-backlog="{name}"]') == count
    assert number(page, '[data-field="dead"]') == 2


def check_redrive(page: Any, api: ApiClient) -> None:
    dry = api.call("POST", "/dead-letters/redrive", body={"error_code": "wxr_malformed", "dry_run": True})
    assert number(page, '[data-count="selected"]') == len(dry["selected"]) == 2


# What each page shows, against what the API answers the same caller (the seeded fleet's figures pinned too).
CHECKS: dict[str, Any] = {
    "overview": check_overview,
    "site": lambda page, api: (  # the live route's preview shows the site's own home page
        page.frame_locator("iframe.preview").locator("h1").inner_text(timeout=5000) == "T"
    ),
    "sites": lambda page, api: number(page, '[data-count="sites"]') == len(api.call("GET", "/sites")) == 3,
    "operations": lambda page, api: (
        number(page, '[data-count="operations"]') == len(api.call("GET", "/operations", query={"limit": 200})) == 5
    ),
    "dead-letters": lambda page, api: (
        number(page, '[data-class-count="wxr_malformed"]') == len(api.call("GET", "/dead-letters")) == 2
    ),
    "redrive": check_redrive,
    "webhooks": lambda page, api: (
        number(page, '[data-count="endpoints"]') == len(api.call("GET", "/webhooks")["endpoints"]) == 1
    ),
    "dependencies": lambda page, api: (
        number(page, '[data-count="dependencies"]') == len(api.call("GET", "/dependencies")) == 1
    ),
    "dependency": lambda page, api: (
        number(page, '[data-count="sites"]') == api.call("GET", "/dependencies/db:acme")["site_count"] == 1
    ),
    "events": lambda page, api: (
        number(page, '[data-count="events"]') == len(api.call("GET", "/events", query={"limit": 100})["events"])
    ),
}


def test_every_page_renders_its_numbers_are_the_apis_and_axe_finds_nothing_serious(
    context: Any, seeded: dict[str, Any], tmp_path: Path
) -> None:
    operator: ApiClient = seeded["operator"]
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    pages = {**PAGES, "operation": f"/operations/{seeded['dead'][0]}"}
    with running_console(operator, caller="operator") as server:
        page = open_console(context, server)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        for name, path in pages.items():
            response = page.goto(f"{server.gate.origin}{path}")
            assert response is not None and response.status == 200, f"{name}: {response and response.status}"
            assert page.locator("h1").count() == 1
            assert serious_violations(page) == [], name
            check = CHECKS.get(name)
            assert check is None or check(page, operator) in (None, True), name
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        assert errors == []  # nothing the CSP refused, no script error


def test_pausing_a_site_with_a_reason_writes_an_audit_entry_naming_the_caller(
    context: Any, seeded: dict[str, Any]
) -> None:
    import re

    from playwright.sync_api import expect

    operator: ApiClient = seeded["operator"]
    with running_console(operator, caller="operator") as server:
        page = open_console(context, server)
        page.goto(f"{server.gate.origin}/sites/beta-news")
        page.fill("form[action$='/pause'] input[name=reason]", "storage migration, ticket 4711")
        page.click("form[action$='/pause'] button")
        page.wait_for_selector(".flash.ok")
        assert "paused" in page.locator('[data-field="paused"]').inner_text()
        assert "by operator" in page.locator('[data-field="paused"]').inner_text()
        [entry] = operator.call("GET", "/audit", query={"action": "pause", "site_id": "beta-news", "since_s": 600})
        assert entry["actor"] == "operator" and entry["reason"] == "storage migration, ticket 4711"
        assert entry["outcome"] == "ok"
        page.goto(f"{server.gate.origin}/audit?action=pause")
        assert page.locator('tr[data-audit="pause"]').count() == 1
        assert operator.call("GET", "/sites/beta-news")["paused_by"] == "operator"
        # work its owner submits meanwhile says, in the browser, that it waits for the pause and why
        owner = as_(seeded["api"], "tenant-b")
        waiting = owner.call("POST", "/operations", body={"kind": "publish", "site_id": "beta-news"})
        page.goto(f"{server.gate.origin}/operations/{waiting['operation_id']}")
        expect(page.locator('[data-field="waiting"]')).to_have_text("paused: storage migration, ticket 4711")
        assert page.locator("text=Estimated delay").count() == 0  # no estimate: a pause ends when someone resumes
        # the events page shows times as dates, and a page that is not there keeps the way back
        page.goto(f"{server.gate.origin}/events?principal=tenant-b")  # its provision's events, placed at seeding
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", page.locator("main table").inner_text())
        assert not re.search(r"\b1[789]\d{8}\.\d+", page.locator("main table").inner_text())  # no epoch floats
        missing = page.goto(f"{server.gate.origin}/operations/op_not_there")
        assert missing is not None and missing.status == 404
        assert page.locator("nav[aria-label=pages] a").count() == 9


def test_a_redrive_by_error_class_shows_the_dry_runs_count_then_empties_the_class(
    context: Any, seeded: dict[str, Any], cloud: Cloud
) -> None:
    operator: ApiClient = seeded["operator"]
    with running_console(operator, caller="operator") as server:
        page = open_console(context, server)
        page.goto(f"{server.gate.origin}/dead-letters")
        page.click("section[data-class='wxr_malformed'] a.button")
        dry = operator.call("POST", "/dead-letters/redrive", body={"error_code": "wxr_malformed", "dry_run": True})
        assert number(page, '[data-count="selected"]') == len(dry["selected"]) == 2
        page.fill("input[name=reason]", "parser fixed in 1.4")
        page.click("button.danger")
        assert "redrove 2 of 2" in page.locator(".flash.ok").inner_text()

        def class_empty() -> bool:
            dead = operator.call("GET", "/dead-letters", query={"error_code": "wxr_malformed"})
            return not dead

        assert wait_for(class_empty, timeout_s=10, what="the class emptied")
        audit = operator.call("GET", "/audit", query={"action": "redrive", "since_s": 600})
        assert {e["actor"] for e in audit} == {"operator"} and len(audit) == 2


def test_a_reader_is_refused_by_the_server_and_read_only_hides_the_actions(
    context: Any, seeded: dict[str, Any]
) -> None:
    reader = as_(seeded["api"], LOCAL_READER)
    assert len(reader.call("GET", "/operations")) == 5  # reads every principal's, as an operator does
    refused = reader.request("POST", "/sites/acme-blog/pause", body={"reason": "curious"})
    assert refused.status == 403 and refused.body["error"] == "forbidden"
    assert (
        reader.request("PUT", "/quotas", body={"principal": "tenant-a", "max_running": 1, "reason": "x"}).status == 403
    )
    with running_console(reader, caller=LOCAL_READER) as server:  # actions shown: the server refuses them
        page = open_console(context, server)
        page.goto(f"{server.gate.origin}/sites/acme-blog")
        page.fill("form[action$='/pause'] input[name=reason]", "through the console")
        page.click("form[action$='/pause'] button")
        assert "Forbidden" in page.locator(".flash.bad").inner_text()
    assert seeded["operator"].call("GET", "/sites/acme-blog")["paused"] is False
    denied = seeded["operator"].call("GET", "/audit", query={"actor": LOCAL_READER, "since_s": 600})
    assert {(e["action"], e["outcome"]) for e in denied} == {("write", "denied")} and len(denied) == 3
    with running_console(reader, caller=LOCAL_READER, read_only=True) as server:
        page = open_console(context, server)
        for path in ("/sites/acme-blog", f"/operations/{seeded['dead'][0]}", "/dead-letters", "/quotas"):
            page.goto(f"{server.gate.origin}{path}")
            assert page.locator("form[method=post]").count() == 0, path
        assert "read-only" in page.locator("header").inner_text()


class _Attacker(BaseHTTPRequestHandler):
    target = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = (
            f'<form id="f" method="post" action="{self.target}"><input name="reason" value="pwned">'
            '<input name="csrf" value="guessed"></form><button id="go" form="f">go</button>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_form_posted_from_another_origin_is_refused(context: Any, seeded: dict[str, Any]) -> None:
    operator: ApiClient = seeded["operator"]
    with running_console(operator, caller="operator") as server:
        _Attacker.target = f"{server.gate.origin}/sites/acme-blog/pause"
        attacker = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
        thread = threading.Thread(target=attacker.serve_forever, daemon=True)
        thread.start()
        try:
            page = open_console(context, server)  # the victim has a session: its cookie goes with the post
            page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
            with page.expect_navigation():
                page.click("#go")
            assert "not sent from this console" in page.content()
        finally:
            attacker.shutdown()
            attacker.server_close()
            thread.join(timeout=5)
    assert operator.call("GET", "/sites/acme-blog")["paused"] is False
    assert operator.call("GET", "/audit", query={"action": "pause", "since_s": 600}) == []


def test_the_token_the_cookie_the_host_and_the_headers_hold_for_plain_http(seeded: dict[str, Any]) -> None:
    http = urllib3.PoolManager(retries=False)
    with running_console(seeded["operator"], caller="operator") as server:
        origin = server.gate.origin
        assert http.request("GET", f"{origin}/").status == 401  # no session: nothing
        assert http.request("GET", f"{origin}/?token=not-it").status == 403
        rebinding = http.request("GET", server.gate.url, headers={"Host": f"evil.example:{server.port}"})
        assert rebinding.status == 421 and "Set-Cookie" not in rebinding.headers
        opened = http.request("GET", server.gate.url, redirect=False)
        assert opened.status == 303 and opened.headers["Location"] == "/"
        cookie = opened.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and server.gate.token not in cookie
        session = {"Cookie": cookie.split(";")[0]}
        page = http.request("GET", f"{origin}/sites", headers=session)
        assert page.status == 200
        csp = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("style-src")[0]
        assert page.headers["Cache-Control"] == "no-store" and page.headers["X-Content-Type-Options"] == "nosniff"
        text = page.data.decode()
        assert "<script>" not in text and "testing" not in text  # no inline script, no AWS key
        pause = f"{origin}/sites/acme-blog/pause"
        form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin, **session}
        assert http.request("POST", pause, body="reason=x", headers=form).status == 403  # no CSRF token
        assert http.request("POST", pause, body="reason=x&csrf=wrong", headers=form).status == 403
        other = {**form, "Origin": "http://127.0.0.1:1"}
        token = server.gate.sessions[session["Cookie"].split("=", 1)[1]].csrf
        assert http.request("POST", pause, body=f"reason=x&csrf={token}", headers=other).status == 403
        done = http.request("POST", pause, body=f"reason=planned&csrf={token}", headers=form, redirect=False)
        assert done.status == 303
    assert seeded["operator"].call("GET", "/sites/acme-blog")["paused"] is True
    assert cookie.startswith(f"{COOKIE}=")


def test_the_console_command_prints_a_url_that_serves_the_console_and_stops_on_ctrl_c(
    seeded: dict[str, Any], tmp_path: Path
) -> None:
    import re
    import signal
    import subprocess
    import sys

    from sitedispatch.domain.resources import API_URL_VARIABLE

    env = {**os.environ, API_URL_VARIABLE: seeded["api"], "NO_COLOR": "1", "COLUMNS": "200"}
    command = [sys.executable, "-m", "sitedispatch", "console", "--as", "operator", "--read-only"]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(2)]
        assert "sitedispatch console for operator (read-only)" in lines[0], lines
        [url] = re.findall(r"http://127\.0\.0\.1:\d+/\?token=\S+", lines[1])
        http = urllib3.PoolManager(retries=False)
        opened = http.request("GET", url, redirect=False)
        assert opened.status == 303
        cookie = opened.headers["Set-Cookie"].split(";")[0]
        overview = http.request("GET", url.split("?")[0], headers={"Cookie": cookie})
        assert overview.status == 200 and "read-only" in overview.data.decode()
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0 and "Traceback" not in err, err


def test_the_console_command_with_nothing_running_says_what_to_do_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.conftest import cli_runner, run_cli

    for name in [n for n in os.environ if n.startswith(("SITEDISPATCH_", "AWS_ENDPOINT_URL"))]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    with cli_runner(api=False) as runner:
        code, out = run_cli(runner, "console")
    assert code == 1 and "sitedispatch local up" in out and "Traceback" not in out
    assert out.startswith("error (not_configured): ") and out.count("error (") == 1  # one message (rich wraps it)


def test_a_page_updates_without_a_reload(context: Any, seeded: dict[str, Any]) -> None:
    operator: ApiClient = seeded["operator"]
    with running_console(operator, caller="operator") as server:
        page = open_console(context, server)
        page.goto(f"{server.gate.origin}/sites/acme-shop")
        assert page.locator('[data-field="paused"]').inner_text().strip() == "no"
        page.evaluate("window.__sameDocument = true")  # gone if the page were loaded again
        operator.call("POST", "/sites/acme-shop/pause", body={"reason": "noticed live"})
        from playwright.sync_api import expect

        expect(page.locator('[data-field="paused"]')).to_contain_text("noticed live", timeout=10_000)
        assert page.evaluate("window.__sameDocument") is True


def test_bulk_cancel_by_filter_shows_the_count_first_then_cancels_each_audited(
    context: Any, seeded: dict[str, Any]
) -> None:
    operator: ApiClient = seeded["operator"]
    tenant = as_(seeded["api"], "tenant-b")
    operator.call("POST", "/sites/beta-news/pause", body={"reason": "hold the queue"})
    for _ in range(3):
        tenant.call("POST", "/operations", body={"kind": "publish", "site_id": "beta-news", "params": {}})
    unfinished = [
        op
        for op in operator.every("/operations", {"site_id": "beta-news"}, limit=100)
        if op["status"] not in ("succeeded", "dead", "cancelled", "superseded")
    ]
    assert len(unfinished) == 3
    with running_console(operator, caller="operator") as server:
        page = open_console(context, server)
        page.goto(f"{server.gate.origin}/operations?site_id=beta-news")
        page.click("text=Cancel every unfinished one matching")
        assert number(page, '[data-count="selected"]') == len(unfinished)
        page.fill("input[name=reason]", "wrong content pushed")
        page.click("button.danger")
        assert "3 of 3 cancelled" in page.locator(".flash.ok").inner_text()
    statuses = {operator.call("GET", f"/operations/{op['operation_id']}")["status"] for op in unfinished}
    assert statuses == {"cancelled"}
    audit = operator.call("GET", "/audit", query={"action": "cancel", "since_s": 600})
    assert len(audit) == 3 and {e["actor"] for e in audit} == {"operator"}
    assert {e["reason"] for e in audit} == {"wrong content pushed"}


def test_the_apis_pages_follow_their_link_header_to_every_operation_once(seeded: dict[str, Any]) -> None:
    operator: ApiClient = seeded["operator"]
    reply = operator.request("GET", "/operations", query={"limit": 2})
    assert reply.status == 200 and len(reply.body) == 2
    assert reply.headers["Link"].startswith("</operations?limit=2&cursor=") and 'rel="next"' in reply.headers["Link"]
    seen, cursor, pages = [], None, 0
    while True:
        found, cursor = operator.page("/operations", {"limit": 2, "cursor": cursor})
        seen += [op["operation_id"] for op in found]
        pages += 1
        if cursor is None:
            break
    assert sorted(seen) == sorted(op["operation_id"] for op in operator.every("/operations", limit=100))
    assert len(seen) == len(set(seen)) == 5 and pages >= 3
    dead, cursor = operator.page("/operations", {"status": "dead", "limit": 1})
    assert len(dead) == 1 and cursor is not None
    refused = operator.request("GET", "/operations", query={"site_id": "acme-blog", "cursor": cursor})
    assert refused.status == 422 and refused.body["field"] == "cursor"  # a cursor belongs to its listing
    tenant_b = as_(seeded["api"], "tenant-b")
    assert {op["principal"] for op in tenant_b.every("/operations", limit=100)} == {"tenant-b"}
