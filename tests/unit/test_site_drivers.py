"""Site drivers without a WordPress: registration rules, credentials by reference, the origin's failure classes,
the crawl's route discovery (a fake origin), and a site naming a driver the deployment lacks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.domain.errors import Conflict, InvalidInput, PermanentError, StaleFence, TransientError
from sitedispatch.domain.model import WORDPRESS_DRIVER, SiteConnection
from sitedispatch.drivers.wordpress.crawl import CrawledRoutes, crawl_plan_key
from sitedispatch.drivers.wordpress.credentials import Credentials, check_reference
from sitedispatch.drivers.wordpress.origin import Credential, Fetched, WordPressOrigin
from tests.fakes import MemoryBlobStore
from tests.unit.conftest import Harness

WP = SiteConnection(WORDPRESS_DRIVER, "http://127.0.0.1:8080", "file:///etc/sitedispatch/acme.json")
SECRET = "secretsmanager:sitedispatch/acme"


# -- registration ------------------------------------------------------------------------------------------------


def test_a_site_is_registered_with_its_connection_once() -> None:
    h = Harness()
    site = h.submitter.register_site("acme-blog", "tenant-a", WP)
    assert site.connection == WP and site.driver == WORDPRESS_DRIVER
    assert h.submitter.register_site("acme-blog", "tenant-a", WP).created_at == site.created_at  # idempotent
    with pytest.raises(Conflict, match="cannot become"):
        h.submitter.register_site("acme-blog", "tenant-a", SiteConnection())
    with pytest.raises(Conflict, match="another principal"):
        h.submitter.register_site("acme-blog", "tenant-b", WP)
    # submitting to it later keeps the connection
    h.submit(site="acme-blog", kind="publish", params={})
    assert h.world.sites.get("acme-blog").connection == WP  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("connection", "field_name"),
    [
        (SiteConnection("gopher"), "driver"),
        (SiteConnection("reference", "http://x.example"), "driver"),
        (SiteConnection(WORDPRESS_DRIVER, None, "file:///c.json"), "url"),
        (SiteConnection(WORDPRESS_DRIVER, "ftp://x.example", "file:///c.json"), "url"),
        (SiteConnection(WORDPRESS_DRIVER, "http://x.example", None), "credential"),
        (SiteConnection(WORDPRESS_DRIVER, "http://x.example", "relative/c.json"), "credential"),
    ],
)
def test_registration_refuses_what_cannot_work_naming_the_field(connection: SiteConnection, field_name: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        Harness().submitter.register_site("acme-blog", "tenant-a", connection)
    assert refused.value.field == field_name


def test_a_site_whose_driver_this_deployment_lacks_goes_dead_with_evidence() -> None:
    h = Harness()  # reference driver only
    h.submitter.register_site("acme-blog", "tenant-a", WP)
    result = h.run("provision", title="t", admin_email="a@b.co")
    assert result.outcome.value == "dead"
    op = h.world.operations.list(site_id="acme-blog")[0]
    assert op.error is not None and op.error.code == "unknown_driver"


# -- credentials -----------------------------------------------------------------------------------------------------


def test_credentials_come_from_a_file_and_are_cached(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"user": "admin", "application_password": "abcd efgh"}))
    credentials = Credentials()
    first = credentials.get(f"file://{path}")
    path.write_text("rotated, but cached for a few minutes")
    assert credentials.get(f"file://{path}") == first == Credential("admin", "abcd efgh")
    assert "abcd" not in repr(first)


def test_credentials_from_secrets_manager_and_their_failures(tmp_path: Path) -> None:
    asked: list[str] = []

    def secret(secret_id: str) -> str:
        asked.append(secret_id)
        return json.dumps({"user": "u", "application_password": "p"})

    assert Credentials(secret).get(SECRET) == Credential("u", "p")
    assert asked == ["sitedispatch/acme"]
    with pytest.raises(PermanentError) as missing:
        Credentials().get(f"file://{tmp_path}/absent.json")
    assert missing.value.code == "credential_missing"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(PermanentError) as invalid:
        Credentials().get(f"file://{tmp_path}/bad.json")
    assert invalid.value.code == "credential_invalid"
    with pytest.raises(PermanentError):
        Credentials().get(SECRET)  # no Secrets Manager reader in this process
    for outside in (
        "s3://bucket/key",
        "secretsmanager:prod/db-password",
        "arn:aws:secretsmanager:us-east-1:1:secret:prod/db-AbCdEf",
    ):
        with pytest.raises(InvalidInput):  # the workers may read only sitedispatch/ secrets
            check_reference(outside)
    assert check_reference("arn:aws:secretsmanager:us-east-1:1:secret:sitedispatch/acme-AbCdEf")


# -- the origin's failure classes -------------------------------------------------------------------------------------


@dataclass
class FakeResponse:
    status: int
    data: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakePool:
    responses: list[FakeResponse]
    sent: list[dict[str, Any]] = field(default_factory=list)

    def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None, redirect: bool = False
    ) -> FakeResponse:
        self.sent.append({"method": method, "url": url, "headers": headers})
        return self.responses.pop(0)


def origin_answering(*responses: FakeResponse, fence: int | None = 7) -> tuple[WordPressOrigin, FakePool]:
    pool = FakePool(list(responses))
    return WordPressOrigin("http://wp.example/blog/", Credential("u", "secret"), fence, pool), pool  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("response", "error", "code"),
    [
        (
            FakeResponse(409, b'{"code":"sitedispatch_stale_fence","message":"fence 7 is stale"}'),
            StaleFence,
            "stale_fence",
        ),
        (FakeResponse(503, b"<html>maintenance</html>"), TransientError, "wordpress_unavailable"),
        (FakeResponse(429), TransientError, "wordpress_unavailable"),
        (FakeResponse(401, b'{"code":"rest_not_logged_in","message":"no"}'), PermanentError, "wordpress_unauthorized"),
        (FakeResponse(400, b'{"code":"rest_invalid_param","message":"bad"}'), PermanentError, "wordpress_rejected"),
        (FakeResponse(200, b"<?php fatal error"), TransientError, "wordpress_bad_answer"),
    ],
)
def test_answers_map_to_failure_classes(response: FakeResponse, error: type[Exception], code: str) -> None:
    origin, _ = origin_answering(response)
    with pytest.raises(error) as raised:
        origin.rest("POST", "/wp/v2/posts", {"title": "x"})
    assert getattr(raised.value, "code", None) == code
    assert "secret" not in str(raised.value)


def test_writes_carry_the_fence_and_reads_do_not() -> None:
    origin, pool = origin_answering(FakeResponse(201, b'{"id": 1}'), FakeResponse(200, b"[]"))
    origin.rest("POST", "/wp/v2/posts", {"title": "x"})
    origin.rest("GET", "/wp/v2/posts")
    assert pool.sent[0]["headers"]["X-Sitedispatch-Fence"] == "7"
    assert "X-Sitedispatch-Fence" not in pool.sent[1]["headers"]
    assert pool.sent[0]["url"] == "http://wp.example/blog/wp-json/wp/v2/posts"


def test_a_missing_mu_plugin_is_named() -> None:
    origin, _ = origin_answering(FakeResponse(404, b'{"code":"rest_no_route","message":"No route"}'))
    with pytest.raises(PermanentError) as raised:
        origin.info()
    assert raised.value.code == "mu_plugin_missing"


# -- the crawl -------------------------------------------------------------------------------------------------------


@dataclass
class FakeSite:
    pages: dict[str, Fetched]
    base_url: str = "http://wp.example"
    fetched: list[str] = field(default_factory=list)

    def fetch(self, path: str) -> Fetched:
        self.fetched.append(path)
        return self.pages.get(path, Fetched(404, b"not found", "text/html"))

    def path_of(self, url: str) -> str | None:
        return url[len(self.base_url) :] if url.startswith(self.base_url) else None


def sitemap(kind: str, locs: list[str]) -> Fetched:
    entry = "sitemap" if kind == "sitemapindex" else "url"
    body = "".join(f"<{entry}><loc>{loc}</loc></{entry}>" for loc in locs)
    return Fetched(
        200,
        f'<?xml version="1.0"?><{kind} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</{kind}>'.encode(),
        "application/xml",
    )


def test_the_crawl_lists_home_feed_and_every_sitemap_url_once_per_revision() -> None:
    site = FakeSite(
        {
            "/wp-sitemap.xml": sitemap(
                "sitemapindex",
                ["http://wp.example/wp-sitemap-posts-post-1.xml", "http://elsewhere.example/wp-sitemap-x.xml"],
            ),
            "/wp-sitemap-posts-post-1.xml": sitemap(
                "urlset", ["http://wp.example/2026/11/hello/", "http://wp.example/?p=3", "http://cdn.example/a/"]
            ),
        }
    )
    blobs = MemoryBlobStore()
    routes = CrawledRoutes(site, blobs, "acme-blog", "r1").routes()  # type: ignore[arg-type]
    assert [r.path for r in routes] == [
        "/",
        "/2026/11/hello/",
        "/feed/",
        "/wp-sitemap-posts-post-1.xml",
        "/wp-sitemap.xml",
    ]
    assert [r.content_type.split(";")[0] for r in routes] == [
        "text/html",
        "text/html",
        "application/rss+xml",
        "application/xml",
        "application/xml",
    ]
    # the list is stored with the revision: a later delivery renders the same list without crawling again
    site.pages.clear()
    site.fetched.clear()
    assert [r.path for r in CrawledRoutes(site, blobs, "acme-blog", "r1").routes()] == [  # type: ignore[arg-type]
        r.path for r in routes
    ]
    assert site.fetched == [] and crawl_plan_key("acme-blog", "r1") in blobs.objects


def test_a_route_the_origin_cannot_serve_is_transient() -> None:
    source = CrawledRoutes(FakeSite({}), MemoryBlobStore(), "acme-blog", "r1")  # type: ignore[arg-type]
    with pytest.raises(TransientError) as raised:
        source.routes()  # no sitemap: nothing to plan from yet
    assert raised.value.code == "route_unavailable"


def test_drivers_are_built_on_first_use_only() -> None:
    from sitedispatch.domain.model import Site
    from sitedispatch.drivers.reference.driver import ReferenceDriver
    from sitedispatch.kinds.registry import DriverRegistry, driver_for

    built: list[str] = []

    def factory(name: str) -> Any:
        def build() -> Any:
            built.append(name)
            return ReferenceDriver()

        return build

    registry = DriverRegistry({"reference": factory("reference"), "wordpress": factory("wordpress")})
    site = Site("acme-blog", "p", 0.0)
    assert driver_for(registry, site) is driver_for(registry, site)
    assert built == ["reference"] and sorted(registry) == ["reference", "wordpress"]
    with pytest.raises(PermanentError) as unknown:
        driver_for(registry, Site("acme-blog", "p", 0.0, connection=SiteConnection("gopher")))
    assert unknown.value.code == "unknown_driver" and "reference, wordpress" in str(unknown.value)
