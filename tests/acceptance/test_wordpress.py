"""Real WordPress (Debian's packages: PHP, MariaDB) driven through the local runtime: provision, import, publish
and wp_cron against live sites, a worker killed mid-import, a stale fence refused by the mu-plugin, and a failed
route fetch that leaves the previous publication live.

CI installs the packages (.ci/run) and sets SITEDISPATCH_REQUIRE_WORDPRESS=1, so these never skip there; on a machine
without them they skip, naming what to install."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.dependencies import Dependencies
from sitedispatch.domain.model import WORDPRESS_DRIVER, Operation, SiteConnection, Status
from sitedispatch.domain.resources import visibility_timeout_s
from sitedispatch.domain.settings import Settings
from sitedispatch.drivers.wordpress.credentials import Credentials
from sitedispatch.drivers.wordpress.origin import WordPressOrigin
from sitedispatch.local.supervisor import LocalRuntime
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.local.wordpress import PACKAGES, LocalWordPress, WordPressSite, missing_programs
from sitedispatch.publication.live import read_live_route, receipt_key
from sitedispatch.wxr import WxrItem, parse_wxr
from tests.acceptance.conftest import as_function, wait_for
from tests.factories import PROVISION, present

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "wxr" / "themeunittestdata.wordpress.xml"  # = shared's
PRINCIPAL = "tenant-wp"
FUNCTION_TIMEOUT_S = 120
# A worker killed after the event source received a message and before the handler tied its visibility to the
# lease leaves it hidden for the queue's whole visibility timeout (on AWS too: 6 x the function's timeout), then
# it is delivered again: the bound a recovery after a kill can be held to.
RECOVERY_S = visibility_timeout_s(FUNCTION_TIMEOUT_S) + 60
STATUSES = "publish,future,draft,pending,private"


def require_packages() -> None:
    missing = missing_programs()
    if missing:
        if os.environ.get("SITEDISPATCH_REQUIRE_WORDPRESS") == "1":
            pytest.fail(f"WordPress packages missing: {missing}")
        pytest.skip(f"needs {' '.join(PACKAGES)} (missing: {', '.join(missing)})")


@pytest.fixture(scope="module")
def wordpress(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWordPress]:
    require_packages()
    with LocalWordPress(tmp_path_factory.mktemp("wordpress")) as wp:
        wp.start_database()
        yield wp


@pytest.fixture
def dispatcher(runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch) -> Dependencies:
    """The local runtime (cloud, workers in real processes) and in-process dependencies pointing at it. Imports run
    in steps of 50 events, each invocation handing over to the next after every step (a step may take as long as
    the function's timeout, so two never fit in one)."""
    policy = {"lease_seconds": 3, "import_step_items": 50, "import_step_s": FUNCTION_TIMEOUT_S}
    env = runtime.start_cloud(0, function_timeout_s=FUNCTION_TIMEOUT_S, policy=policy)
    runtime.start_workers(
        [("operations", 2, None, None, None), ("bulk", 1, "bulk", None, None), ("publications", 2, None, None, None)]
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Dependencies(Settings()).warm()


def origin(site: WordPressSite, fence: int | None = None) -> WordPressOrigin:
    return WordPressOrigin(site.url, Credentials().get(site.credential_ref), fence)


def register(deps: Dependencies, site: WordPressSite) -> None:
    deps.submitter().register_site(
        site.name, PRINCIPAL, SiteConnection(WORDPRESS_DRIVER, site.url, site.credential_ref)
    )


def run(
    deps: Dependencies, kind: str, site: str, params: dict[str, Any] | None = None, timeout_s: float = 120
) -> Operation:
    op_id = (
        deps.submitter()
        .submit(kind=kind, site_id=site, principal=PRINCIPAL, params=params if params is not None else {})
        .operation.operation_id
    )
    return wait_for(
        lambda: (op := deps.operations.get(op_id)) is not None and op.status.terminal and op,
        timeout_s=timeout_s,
        what=f"{kind} on {site} terminal",
    )


def live_after(deps: Dependencies, site: str, seq: int) -> Any:
    return wait_for(
        lambda: (s := deps.sites.get(site)) is not None and s.live_seq >= seq and s,
        timeout_s=120,
        what=f"{site} publication {seq} live",
    )


def sources_in_wordpress(site: WordPressSite) -> list[str]:
    """The source key of every imported post and page, counted through REST (duplicates would repeat)."""
    wp = origin(site)
    found = []
    for collection in ("posts", "pages"):
        for item in wp.rest_pages(f"/wp/v2/{collection}", {"context": "edit", "status": STATUSES}):
            source = (item.get("meta") or {}).get("sitedispatch_source")
            if source:
                found.append(source)
    return found


def live_routes(deps: Dependencies, site: str) -> list[str]:
    record = deps.sites.get(site)
    assert record is not None and record.live_revision
    return [entry["route"] for entry in json.loads(deps.blobs.get(receipt_key(site, record.live_revision)))["routes"]]


def test_provision_import_publish_through_real_wordpress(wordpress: LocalWordPress, dispatcher: Dependencies) -> None:
    deps = dispatcher
    site = wordpress.add_site("wp-main")
    register(deps, site)

    # provision verifies the site and takes the first publication: a crawl of the origin
    provisioned = run(deps, "provision", site.name, PROVISION)
    assert provisioned.status == Status.SUCCEEDED, provisioned.error
    commit = deps.commits.get(provisioned.operation_id)
    assert commit is not None and commit.summary["wordpress_version"].startswith("6.")
    live = live_after(deps, site.name, 1)
    assert {"/", "/feed/", "/wp-sitemap.xml"} <= set(live_routes(deps, site.name))
    home, _ = read_live_route(deps.sites, deps.blobs, site.name, "/")
    assert b"<html" in home and site.name.encode() in home

    # import WordPress's own theme test data through REST
    params = deps.submitter().stage_upload(site.name, FIXTURE, PRINCIPAL)
    started = time.monotonic()
    imported = run(deps, "import", site.name, params, timeout_s=300)
    took = time.monotonic() - started
    assert imported.status == Status.SUCCEEDED, imported.error
    summary = deps.commits.get(imported.operation_id).summary  # type: ignore[union-attr]
    created = summary["created"]
    sources = sources_in_wordpress(site)
    assert len(sources) == len(set(sources)) == created["post"] + created["page"]
    items = [e for e in parse_wxr(FIXTURE.open("rb")) if isinstance(e, WxrItem) and e.type in ("post", "page")]
    comments = [c for item in items for c in item.comments if c.type in ("comment", "")]
    assert created["post"] + created["page"] == len(items) == 79  # 58 posts, 21 pages (two share a guid)
    assert created["comment"] == len(comments)
    assert summary["attachments_counted"] == 37
    # WordPress now shows its own sample comment plus every approved imported one
    assert origin(site).info()["counts"]["comments"] == 1 + sum(c.approved == "1" for c in comments)

    # the import's publication is a new crawl that shows the imported posts
    crawled = live_after(deps, site.name, live.live_seq + 1)
    # promotion comes first, the publication's own record just after it: wait for that record
    publication = wait_for(
        lambda: (
            (p := deps.publications.get(site.name, crawled.live_seq)) is not None and p.finished_at is not None and p
        ),
        timeout_s=30,
        what="publication recorded finished",
    )
    assert publication.status.value == "published"
    crawl_s = (crawled.live_at or 0) - publication.created_at  # from the commit to the promotion
    routes = live_routes(deps, site.name)
    assert len(routes) > 100
    post_routes = [r for r in routes if r.count("/") >= 5 and not r.endswith(".xml")]
    body, _ = read_live_route(deps.sites, deps.blobs, site.name, post_routes[0])
    assert b"<html" in body
    total = sum(created.values())
    print(
        f"\nimport: {total} items in {took:.1f}s ({total / took:.1f} items/s, {summary['requests']} requests); "
        f"publication crawled {len(routes)} routes in {crawl_s:.1f}s ({len(routes) / crawl_s:.1f} routes/s)"
    )

    # importing the same file again creates nothing
    again = run(deps, "import", site.name, deps.submitter().stage_upload(site.name, FIXTURE, PRINCIPAL), timeout_s=300)
    assert again.status == Status.SUCCEEDED
    assert deps.commits.get(again.operation_id).summary["created"] == {}  # type: ignore[union-attr]
    assert sorted(sources_in_wordpress(site)) == sorted(sources)


@pytest.mark.timeout(RECOVERY_S + 240)
def test_a_worker_killed_mid_import_creates_no_duplicate(
    wordpress: LocalWordPress, runtime: LocalRuntime, dispatcher: Dependencies
) -> None:
    deps = dispatcher
    site = wordpress.add_site("wp-crash")
    register(deps, site)
    assert run(deps, "provision", site.name, PROVISION).status == Status.SUCCEEDED
    [bulk] = [c for c in runtime.children if c.name == "bulk"]

    op_id = (
        deps.submitter()
        .submit(
            kind="import",
            site_id=site.name,
            principal=PRINCIPAL,
            params=deps.submitter().stage_upload(site.name, FIXTURE, PRINCIPAL),
        )
        .operation.operation_id
    )
    # killed once some items exist in WordPress, well before the import ends
    wait_for(lambda: len(sources_in_wordpress(site)) >= 10, timeout_s=120, interval_s=0.2, what="items created")
    runtime.kill(bulk)
    partial = len(sources_in_wordpress(site))
    assert deps.commits.get(op_id) is None
    # killed between two invocations (its step recorded as a continuation), the next one spends no attempt;
    # killed inside a step, the next attempt (one spent) resumes from the last checkpoint
    handed_over = deps.operations.get(op_id).continuing  # type: ignore[union-attr]

    runtime.start_worker("bulk", 1)
    final = wait_for(  # most often within seconds; a kill inside a delivery's first moments: RECOVERY_S
        lambda: (op := deps.operations.get(op_id)) is not None and op.status.terminal and op,
        timeout_s=RECOVERY_S,
        what="import terminal after restart",
    )
    assert final.status == Status.SUCCEEDED and final.attempt == (1 if handed_over else 2)
    sources = sources_in_wordpress(site)
    assert len(sources) == len(set(sources))  # no item created twice
    items = [e for e in parse_wxr(FIXTURE.open("rb")) if isinstance(e, WxrItem) and e.type in ("post", "page")]
    assert sorted(sources) == sorted(f"{i.guid}#post-{i.wxr_id}" for i in items)  # and none missing
    summary = deps.commits.get(op_id).summary  # type: ignore[union-attr]
    assert summary["steps"] >= 3 and summary["resumed_from_step"] >= 1  # continued from a checkpoint
    assert final.fence is not None and final.fence - 1 >= summary["steps"]  # an invocation per step
    print(
        f"\nkilled with {partial} items in WordPress ({'between invocations' if handed_over else 'in a step'}); "
        f"{summary['steps']} steps, fence {final.fence}; "
        f"{len(sources)} items, each once"
    )


def test_a_worker_stopped_past_its_lease_is_refused_by_wordpress_and_commits_nothing(
    wordpress: LocalWordPress, runtime: LocalRuntime, dispatcher: Dependencies, tmp_path: Path
) -> None:
    deps = dispatcher
    site = wordpress.add_site("wp-fence")
    register(deps, site)
    assert run(deps, "provision", site.name, PROVISION).status == Status.SUCCEEDED
    [stalled] = [c for c in runtime.children if c.name == "bulk"]
    wxr = tmp_path / "posts.xml"
    write_wxr(wxr, posts=150, seed=3)
    op_id = (
        deps.submitter()
        .submit(
            kind="import",
            site_id=site.name,
            principal=PRINCIPAL,
            params=deps.submitter().stage_upload(site.name, wxr, PRINCIPAL),
        )
        .operation.operation_id
    )

    # When the importing worker is stopped (a frozen VM) past its lease, mid-import
    wait_for(lambda: len(sources_in_wordpress(site)) >= 10, timeout_s=120, interval_s=0.2, what="items created")
    stalled.signal_group(signal.SIGSTOP)
    stalled_fence = deps.sites.get(site.name).fence  # type: ignore[union-attr]
    wait_for(
        lambda: (s := deps.sites.get(site.name)) is not None and (s.lease_expires_at or 0) < time.time() - 6,
        timeout_s=30,
        what="lease expired past the reconciler's grace",
    )
    sweep = as_function(runtime, "reconciler").reconciler().run("reconcile")
    assert sweep is not None and sweep.repaired["stale_leases_recovered"] == 1

    # Then another worker takes the import over (a higher fence reaches WordPress) and commits it once
    runtime.start_worker("bulk", 1, name="bulk-takeover")
    done = wait_for(
        lambda: (op := deps.operations.get(op_id)) is not None and op.status.terminal and op,
        timeout_s=300,
        what="takeover committed",
    )
    assert done.status == Status.SUCCEEDED and done.attempt == 2
    assert origin(site).info()["fence"] > stalled_fence

    # and the stopped worker, resumed, has its next write refused by the mu-plugin (409): it commits nothing
    stalled.signal_group(signal.SIGCONT)
    wait_for(
        lambda: b"lease lost before commit" in stalled.log.read_bytes(),
        timeout_s=60,
        what="the resumed worker's write refused",
    )
    assert b"stale_fence" in stalled.log.read_bytes()
    assert present(deps.commits.get(op_id)).operation_id == op_id  # the commit, read consistently by its key
    history = wait_for(  # the by-site index is eventually consistent (the strict cloud lags it, as AWS may)
        lambda: (h := [c.operation_id for c in deps.commits.history(site.name)])[:1] == [op_id] and h,
        timeout_s=5,
        what="the import's commit at the head of the site's history",
    )
    assert history.count(op_id) == 1
    sources = sources_in_wordpress(site)
    assert len(sources) == len(set(sources)) == 150  # every post once, whoever created it


@pytest.mark.guarantee  # G8: the schedule only submits; the operation does the work
@pytest.mark.strict_suffices
def test_a_future_post_goes_live_only_after_wp_cron(
    wordpress: LocalWordPress, dispatcher: Dependencies, runtime: LocalRuntime
) -> None:
    deps = dispatcher
    site = wordpress.add_site("wp-cron")
    register(deps, site)
    assert run(deps, "provision", site.name, PROVISION).status == Status.SUCCEEDED
    live = live_after(deps, site.name, 1)

    # an editor schedules a post (WordPress wants it at least a minute ahead); the site is published meanwhile
    post = origin(site).rest(
        "POST",
        "/wp/v2/posts",
        {
            "title": "Scheduled announcement",
            "status": "future",
            "slug": "scheduled-announcement",
            "date_gmt": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 90)),
        },
    )
    assert post["status"] == "future"
    assert run(deps, "publish", site.name).status == Status.SUCCEEDED
    live = live_after(deps, site.name, live.live_seq + 1)
    assert not any("scheduled-announcement" in route for route in live_routes(deps, site.name))

    # its minute passes (the test moves the post and its scheduled event two seconds ahead instead of waiting), and
    # WordPress alone does not publish it (DISABLE_WP_CRON: no visitor-triggered cron) ...
    due = time.time() + 2
    wordpress.run_php(
        site,
        f"""
        $when = {int(due)};
        $GLOBALS['wpdb']->update($GLOBALS['wpdb']->posts, ['post_date_gmt' => gmdate('Y-m-d H:i:s', $when),
            'post_date' => gmdate('Y-m-d H:i:s', $when)], ['ID' => {post["id"]}]);
        clean_post_cache({post["id"]});
        wp_clear_scheduled_hook('publish_future_post', [{post["id"]}]);
        wp_schedule_single_event($when, 'publish_future_post', [{post["id"]}]);""",
    )
    wait_for(lambda: time.time() > due + 1, timeout_s=10, what="the post's date")
    assert origin(site).fetch("/").status == 200  # visitors come and go: no cron runs
    assert origin(site).rest("GET", f"/wp/v2/posts/{post['id']}", query={"context": "edit"})["status"] == "future"

    # ... the wp-events schedule finds the site due and submits wp_cron, which runs the event and publishes
    swept = as_function(runtime, "reconciler").reconciler().run("wp-events")
    assert swept is not None and swept.repaired["wp_cron_submitted"] == 1, swept
    cron = wait_for(
        lambda: next(
            (
                op
                for op in deps.operations.list(site_id=site.name, limit=20)
                if op.kind.value == "wp_cron" and op.status.terminal
            ),
            None,
        ),
        timeout_s=120,
        what="wp_cron terminal",
    )
    assert cron.status == Status.SUCCEEDED, cron.error
    assert origin(site).rest("GET", f"/wp/v2/posts/{post['id']}", query={"context": "edit"})["status"] == "publish"
    live_after(deps, site.name, live.live_seq + 1)
    assert any("scheduled-announcement" in route for route in live_routes(deps, site.name))


def test_anonymous_requests_with_a_huge_fence_change_nothing(
    wordpress: LocalWordPress, dispatcher: Dependencies, tmp_path: Path
) -> None:
    """The fence is the dispatcher's: a request of anyone else carrying the header neither moves nor meets it."""
    import urllib3

    from sitedispatch.domain.errors import StaleFence

    deps = dispatcher
    site = wordpress.add_site("wp-anon")
    register(deps, site)
    assert run(deps, "provision", site.name, PROVISION).status == Status.SUCCEEDED
    before = int(origin(site).info()["fence"])
    huge = {"X-Sitedispatch-Fence": "999999999999", "Content-Type": "application/json"}
    http = urllib3.PoolManager()
    post = http.request("POST", f"{site.url}/wp-json/wp/v2/posts", body=b'{"title": "x"}', headers=huge)
    cron = http.request("GET", f"{site.url}/wp-cron.php", headers=huge)
    assert post.status == 401 and cron.status == 200
    assert int(origin(site).info()["fence"]) == before  # ignored, not stored

    # the dispatcher still imports and runs due events, each under a fresh fence
    wxr = tmp_path / "small.xml"
    write_wxr(wxr, posts=3, seed=5)
    imported = run(deps, "import", site.name, deps.submitter().stage_upload(site.name, wxr, PRINCIPAL))
    assert imported.status == Status.SUCCEEDED, imported.error
    assert run(deps, "wp_cron", site.name, {"due_minute": int(time.time() // 60)}).status == Status.SUCCEEDED
    highest = int(origin(site).info()["fence"])
    assert before < highest < 999999999999
    # and a stale fence from the dispatcher is still refused (409)
    with pytest.raises(StaleFence):
        origin(site, fence=highest - 1).rest("POST", "/wp/v2/posts", {"title": "stale", "status": "draft"})


def test_a_failed_route_fetch_leaves_the_previous_publication_live(
    wordpress: LocalWordPress, dispatcher: Dependencies
) -> None:
    deps = dispatcher
    site = wordpress.add_site("wp-broken")
    register(deps, site)
    assert run(deps, "provision", site.name, PROVISION).status == Status.SUCCEEDED
    live = live_after(deps, site.name, 1)
    previous = set(live_routes(deps, site.name))

    # one route starts failing (a plugin error on one page), then a publish is requested
    origin(site).rest("POST", "/wp/v2/pages", {"title": "Broken", "slug": "broken", "status": "publish"})
    breaker = site.directory / "wp-content" / "mu-plugins" / "break-one-route.php"
    refusals = site.directory / "broken-refusals.log"
    breaker.write_text(
        "<?php\nif (str_starts_with($_SERVER['REQUEST_URI'] ?? '', '/broken/')) "
        f"{{ file_put_contents('{refusals}', 'x', FILE_APPEND); http_response_code(500); "
        "exit('boom'); }\n"
    )
    publish = run(deps, "publish", site.name)
    assert publish.status == Status.SUCCEEDED  # the commit is recorded; its publication waits
    seq = deps.commits.get(publish.operation_id).version  # type: ignore[union-attr]
    assert deps.publications.get(site.name, seq) is not None  # its outbox row, written with the commit
    wait_for(
        lambda: refusals.exists() and refusals.stat().st_size >= 2,
        timeout_s=60,
        what="the failing route fetched (and refused) at least twice",
    )
    record = deps.sites.get(site.name)
    assert record is not None and record.live_seq == live.live_seq  # the previous publication is still live
    for route in previous:
        read_live_route(deps.sites, deps.blobs, site.name, route)  # and every route of it readable
    assert deps.publications.get(site.name, seq).status.value == "pending"  # type: ignore[union-attr]

    # once the route answers again, the same publication completes (no half receipt was ever written)
    breaker.unlink()
    live_after(deps, site.name, seq)
    assert "/broken/" in live_routes(deps, site.name)


def test_a_work_directory_kept_from_an_earlier_run_gives_a_fresh_site_again(tmp_path: Path) -> None:
    """`make demo` twice: the second run keeps the first run's MariaDB data directory, whose database user still had
    the first run's password (WordPress then printed its database error page instead of installing)."""
    require_packages()
    for run_number in (1, 2):
        with LocalWordPress(tmp_path) as wp:
            wp.start_database()
            site = wp.add_site("again", title=f"Run {run_number}")
            assert origin(site).rest("GET", "/")["name"] == f"Run {run_number}"  # installed afresh
            posts = list(origin(site).rest_pages("/wp/v2/posts", {"context": "edit", "status": STATUSES}))
            assert [p["slug"] for p in posts] == ["hello-world"]
