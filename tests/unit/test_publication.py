"""Publication under hostile delivery: duplicates, reverse order, stale revisions; receipts; monotonic promotion."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import NotFound
from sitedispatch.domain.events import Event
from sitedispatch.domain.model import PublicationMessage, PublicationStatus
from sitedispatch.drivers.reference.content import gmt
from sitedispatch.publication.live import live_key, object_key, read_live_route, receipt_key
from tests.factories import present
from tests.unit.conftest import FIXTURES, THEME_TEST_DATA, Harness


def live(harness: Harness, site: str = "acme-blog") -> tuple[int, str | None]:
    record = harness.world.sites.get(site)
    assert record is not None
    return record.live_seq, record.live_revision


def receipt(harness: Harness, revision: str, site: str = "acme-blog") -> dict:
    return json.loads(harness.world.blobs.get(receipt_key(site, revision)))


def assert_complete(harness: Harness, revision: str, site: str = "acme-blog") -> dict:
    """The receipt lists every route, and every listed object exists with that sha256 and size."""
    import hashlib

    document = receipt(harness, revision, site)
    assert document["route_count"] == len(document["routes"]) > 0
    for entry in document["routes"]:
        body = harness.world.blobs.get(object_key(site, revision, entry["route"]))
        assert hashlib.sha256(body).hexdigest() == entry["sha256"] and len(body) == entry["size"]
    return document


def test_provision_is_published_with_a_complete_receipt_and_live_json(harness: Harness) -> None:
    harness.provisioned()

    seq, revision = live(harness)
    site = harness.world.sites.get("acme-blog")
    assert seq == 1 and revision == site.head_revision  # type: ignore[union-attr]
    document = assert_complete(harness, revision)  # type: ignore[arg-type]
    day = gmt(harness.world.clock.now())[:10].replace("-", "/")  # the provision's acceptance date
    assert {e["route"] for e in document["routes"]} == {
        "/",
        "/feed/",
        "/sitemap.xml",
        "/sample-page/",
        "/category/uncategorized/",
        f"/{day}/hello-world/",
    }
    home, _ = read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", "/")
    assert b"Acme Blog" in home and b"Hello world!" in home
    assert b"Privacy Policy" not in home  # a draft is not published
    pointer = json.loads(harness.world.blobs.get(live_key("acme-blog")))
    assert pointer["seq"] == 1 and pointer["revision_id"] == revision
    assert harness.world.publications.get("acme-blog", 1).status == PublicationStatus.PUBLISHED  # type: ignore[union-attr]


def test_rendering_is_deterministic_so_every_rewrite_is_a_no_op(harness: Harness) -> None:
    harness.provisioned()
    _, revision = live(harness)
    before = dict(harness.world.blobs.objects)
    # publish the same revision again under a new sequence: every route object already exists, byte for byte
    assert harness.run("publish").outcome == Outcome.SUCCEEDED
    harness.drain_publications()
    assert live(harness) == (2, revision)
    for key, body in before.items():
        if key != live_key("acme-blog"):  # the pointer document moves on; every immutable object is unchanged
            assert harness.world.blobs.objects[key] == body


@pytest.mark.parametrize("order", ["reverse", "duplicated", "shuffled-duplicates"])
def test_chunks_delivered_in_any_order_and_any_number_of_times_publish_once(order: str) -> None:
    harness = Harness(publication_chunk_routes=7)
    harness.provisioned()
    result = harness.import_file(THEME_TEST_DATA)
    assert result.outcome == Outcome.SUCCEEDED
    rng = random.Random(11)

    def arrange(batch: list[PublicationMessage]) -> list[PublicationMessage]:
        if order == "reverse":
            return list(reversed(batch))
        doubled = batch + batch
        if order == "shuffled-duplicates":
            rng.shuffle(doubled)
        return doubled

    harness.drain_publications(arrange)

    seq, revision = live(harness)
    assert seq == 2 and revision == result.commit.revision_id  # type: ignore[union-attr]
    document = assert_complete(harness, revision)  # type: ignore[arg-type]
    assert document["route_count"] > 100
    publication = harness.world.publications.get("acme-blog", 2)
    assert publication is not None and publication.status == PublicationStatus.PUBLISHED
    assert publication.total_chunks is not None and len(publication.done_chunks) == publication.total_chunks > 10


def test_an_older_publication_finishing_last_never_replaces_a_newer_one(harness: Harness) -> None:
    harness.provisioned()
    first = harness.import_file(FIXTURES / "fixture-1.1.xml", key="one")  # seq 2
    second = harness.run("publish", key="two")  # seq 3, same content
    messages = list(harness.world.publication_queue.sent)
    harness.world.publication_queue.sent.clear()
    assert [m.seq for m in messages] == [2, 3]

    # the newer publication completes first, then the older one's messages arrive (late, and twice)
    harness.world.publication_queue.sent.append(messages[1])
    harness.drain_publications()
    assert live(harness)[0] == 3
    harness.world.publication_queue.sent.extend([messages[0], messages[0]])
    harness.drain_publications()

    assert live(harness)[0] == 3
    assert harness.world.publications.get("acme-blog", 2).status == PublicationStatus.SUPERSEDED  # type: ignore[union-attr]
    assert json.loads(harness.world.blobs.get(live_key("acme-blog")))["seq"] == 3
    assert first.commit and second.commit


def test_the_previous_publication_stays_complete_and_live_until_the_new_one_is(harness: Harness) -> None:
    harness = Harness(publication_chunk_routes=5)
    harness.provisioned()
    old_seq, old_revision = live(harness)
    old_routes = [e["route"] for e in receipt(harness, old_revision)["routes"]]  # type: ignore[arg-type]
    harness.import_file(THEME_TEST_DATA)
    publisher = harness.publisher()
    publisher.process(harness.world.publication_queue.sent.pop(0))  # plan
    chunks = list(harness.world.publication_queue.sent)
    harness.world.publication_queue.sent.clear()

    for message in chunks[:-1]:  # all but the last chunk
        publisher.process(message)
        assert live(harness) == (old_seq, old_revision)
        for route in old_routes:
            read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", route)
    with pytest.raises(NotFound):  # no receipt before every route exists
        harness.world.blobs.get(receipt_key("acme-blog", chunks[0].revision_id))

    publisher.process(chunks[-1])

    assert live(harness) == (2, chunks[0].revision_id)
    # and the old revision's objects are still there, intact, for a rollback
    assert_complete(harness, old_revision)  # type: ignore[arg-type]


def test_rollback_makes_an_old_revision_live_under_a_newer_sequence(harness: Harness) -> None:
    harness.provisioned()
    _, original = live(harness)
    harness.import_file(FIXTURES / "fixture-1.2.xml")
    harness.drain_publications()
    _, imported = live(harness)
    assert imported != original

    assert harness.run("recover", revision_id=original, mode="rollback").outcome == Outcome.SUCCEEDED
    harness.drain_publications()

    assert live(harness) == (3, original)
    assert harness.world.sites.get("acme-blog").head_revision == imported  # type: ignore[union-attr]
    assert harness.run("recover", revision_id="0" * 64).reason == "unknown_revision"


def test_restore_makes_head_content_an_old_revision(harness: Harness) -> None:
    harness.provisioned()
    _, original = live(harness)
    harness.import_file(FIXTURES / "fixture-1.2.xml")
    harness.drain_publications()

    assert harness.run("recover", revision_id=original, mode="restore").outcome == Outcome.SUCCEEDED
    harness.drain_publications()

    assert harness.world.sites.get("acme-blog").head_revision == original  # type: ignore[union-attr]
    assert live(harness) == (3, original)


@pytest.mark.parametrize("layout", ["one document", "pages"])
def test_wp_cron_publishes_future_posts_once_their_date_passes(
    harness: Harness, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In pages (4 ids each, past 3 posts), the cron reads only the page that holds the future post."""
    from sitedispatch.drivers.reference import content
    from sitedispatch.drivers.reference.content import parse_gmt
    from sitedispatch.drivers.reference.store import ContentStore

    if layout == "pages":
        monkeypatch.setattr(content, "PAGE_IDS", 4)
        monkeypatch.setattr(content, "FLAT_MAX_POSTS", 3)
    harness.provisioned()
    harness.import_file(FIXTURES / "fixture-1.2.xml")
    harness.drain_publications()
    store = ContentStore(harness.world.blobs, "acme-blog")
    frame = store.stored_manifest(present(harness.world.sites.get("acme-blog")).head_revision or "")
    assert frame.paged == (layout == "pages") and (not frame.paged or len(frame.pages) > 2)
    page_reads: list[str] = []
    real_get = harness.world.blobs.get

    def get(key: str) -> bytes:
        if "/pages/" in key:
            page_reads.append(key)
        return real_get(key)

    monkeypatch.setattr(harness.world.blobs, "get", get)
    due = int(parse_gmt("2030-06-01 12:00:00") // 60)
    with pytest.raises(NotFound):
        read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", "/2030/06/01/future-post/")

    early = harness.run("wp_cron", key="early", due_minute=due - 1)
    assert page_reads == []  # nothing due yet: no page read
    harness.drain_publications()
    assert early.commit.summary["published_posts"] == []  # type: ignore[union-attr]
    # the core events were due long before 2030: they ran, and recurring ones moved past as_of
    assert "wp_version_check" in early.commit.summary["ran_events"]  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", "/2030/06/01/future-post/")

    page_reads.clear()  # the publication reads every page back
    on_time = harness.run("wp_cron", key="on-time", due_minute=due)
    reads_of_the_cron = len(page_reads)
    harness.drain_publications()

    assert reads_of_the_cron == (1 if layout == "pages" else 0)  # the one page with the due post
    assert len(on_time.commit.summary["published_posts"]) == 1  # type: ignore[union-attr]
    assert on_time.commit.summary["ran_events"] == []  # type: ignore[union-attr]  # not due again a minute later
    page, _ = read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", "/2030/06/01/future-post/")
    assert b"From the future" in page
    feed, _ = read_live_route(harness.world.sites, harness.world.blobs, "acme-blog", "/feed/")
    assert b"Future post" in feed


def test_live_json_never_moves_backwards(harness: Harness) -> None:
    from dataclasses import replace

    from sitedispatch.publication.live import write_live_document

    harness.provisioned()
    site = harness.world.sites.get("acme-blog")
    assert site is not None
    newer = replace(site, live_seq=9, live_revision="f" * 64)
    assert write_live_document(harness.world.blobs, newer)
    assert write_live_document(harness.world.blobs, site)  # older: leaves the newer document alone
    assert json.loads(harness.world.blobs.get(live_key("acme-blog")))["seq"] == 9


@pytest.mark.parametrize("where", ["publish_reply_lost", "promoted_not_recorded"])
def test_a_publication_promoted_before_its_finisher_stopped_is_recorded_published_not_superseded(where: str) -> None:
    """Found by the chaos campaign (seed 50): the finisher promoted, then died before recording the publication; the
    redelivered last chunk saw live_seq >= seq and called its own live publication superseded. The promotion and the
    record are now one transaction; what is left: the transaction applied but its reply was lost (or the finisher
    stopped right after it, before live.json), and a pointer promoted without its record (left by a finisher of
    the earlier, two-step version)."""
    harness = Harness()
    harness.provisioned()
    harness.import_file(FIXTURES / "fixture-1.2.xml")
    sites, publications = harness.world.sites, harness.world.publications
    real_publish = publications.publish
    failures = {"left": 1}

    def publish_then_fail(site_id: str, seq: int, revision_id: str, now: float, event: Event) -> bool:
        if where == "promoted_not_recorded":  # the pointer moves, the record does not, and the process dies
            site = present(sites.get(site_id))
            harness.world.db.sites[site_id] = replace(site, live_seq=seq, live_revision=revision_id, live_at=now)
            failures["left"] -= 1
            raise RuntimeError("the process died here")
        published = real_publish(site_id, seq, revision_id, now, event)
        if failures["left"]:
            failures["left"] -= 1
            raise TimeoutError("the reply was lost; the transaction was applied")
        return published

    publications.publish = publish_then_fail  # type: ignore[method-assign]
    publisher = harness.publisher()
    pending = list(harness.world.publication_queue.sent)
    harness.world.publication_queue.sent.clear()
    failed = []
    for message in pending:
        try:
            publisher.process(message)
        except (RuntimeError, TimeoutError):
            failed.append(message)  # not deleted: SQS delivers it again
        pending.extend(harness.world.publication_queue.sent)
        harness.world.publication_queue.sent.clear()
    assert len(failed) == 1 and failures["left"] == 0
    assert json.loads(harness.world.blobs.get(live_key("acme-blog")))["seq"] == 1  # live.json not yet moved
    publisher.process(failed[0])  # the redelivery

    site = sites.get("acme-blog")
    assert site is not None and site.live_seq == 2
    publication = publications.get("acme-blog", 2)
    assert publication is not None and publication.status == PublicationStatus.PUBLISHED
    assert json.loads(harness.world.blobs.get(live_key("acme-blog")))["seq"] == 2
