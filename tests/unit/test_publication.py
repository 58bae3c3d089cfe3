"""Publication under hostile delivery: duplicates, reverse order, stale revisions; receipts; monotonic promotion."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

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


def slow_puts(harness: Harness, seconds: float) -> None:
    """Every object stored takes `seconds` of the harness's clock (an origin, or S3, that is slow today)."""
    world = harness.world
    put = world.blobs.put_if_absent

    def slow(key: str, body: Any, content_type: str = "application/json", sha256: str | None = None) -> bool:
        world.clock.advance(seconds)
        return put(key, body, content_type, sha256)

    world.blobs.put_if_absent = slow  # type: ignore[method-assign]


def deliveries(harness: Harness, order: Callable[[list[PublicationMessage]], list[PublicationMessage]]) -> list[Any]:
    """Deliver every publication message as `order` arranges each round, the clock's time each delivery took."""
    publisher, world, taken = harness.publisher(), harness.world, []
    while world.publication_queue.sent:
        batch = list(world.publication_queue.sent)
        world.publication_queue.sent.clear()
        for message in order(batch):
            began = world.clock.now()
            result = publisher.process(message)
            taken.append((message, result.reason, world.clock.now() - began))
    return taken


@pytest.mark.parametrize("chunk_routes", [1000, 60], ids=["one chunk", "several chunks"])
def test_a_chunk_longer_than_a_delivery_is_stored_in_parts_continued_and_published_as_if_in_one(
    chunk_routes: int,
) -> None:
    """Each delivery renders for its slice of time and hands the rest on; the receipt is the one a single
    delivery would have written, byte for byte, whatever order and duplicates the continuations arrive in."""
    receipts = []
    for slow, order in ((0.0, list), (0.05, list), (0.05, lambda batch: list(reversed(batch + batch)))):
        harness = Harness(publication_chunk_routes=chunk_routes, publication_slice_s=1.0)
        harness.provisioned()
        revision = harness.import_file(THEME_TEST_DATA).commit.revision_id  # type: ignore[union-attr]
        slow_puts(harness, slow)
        taken = deliveries(harness, order)
        assert live(harness) == (2, revision)
        receipts.append(harness.world.blobs.get(receipt_key("acme-blog", revision)))
        continued = [m for m, reason, _ in taken if m.parts]
        if slow:
            # a batch of 32 routes takes 1.6 s here: one batch a delivery, and each is continued from where it ended
            assert continued and all(m.resume_at % 32 == 0 for m in continued)
            assert max(seconds for _, _, seconds in taken) <= 1.0 + 32 * slow + 3 * slow  # its slice and one batch
        else:
            assert continued == []
        assert_complete(harness, revision)
    assert receipts[0] == receipts[1] == receipts[2]


def test_a_delivery_stops_well_before_the_functions_timeout_and_always_makes_progress() -> None:
    harness = Harness(publication_chunk_routes=1000, publication_slice_s=60.0)
    harness.provisioned()
    harness.import_file(THEME_TEST_DATA)
    slow_puts(harness, 0.05)
    plan = harness.world.publication_queue.sent.pop()
    publisher, clock = harness.publisher(), harness.world.clock
    # 8 s left: 3 s before the reserve kept for what follows the last batch; batches of 1.6 s
    result = publisher.process(plan, deadline=clock.now() + 8.0)
    assert result.reason == "chunk 1/1: continued"
    (continuation,) = harness.world.publication_queue.sent
    assert continuation.parts == (32,)  # a second batch would not have ended twice its time before the reserve
    # no time left at all: one batch still runs, so a chain of deliveries always ends
    harness.world.publication_queue.sent.clear()
    publisher.process(continuation, deadline=clock.now())
    assert harness.world.publication_queue.sent[-1].parts == (32, 64)


def test_a_step_that_fails_or_is_stopped_is_counted_with_its_reason_on_the_publication() -> None:
    from sitedispatch.domain.errors import TransientError

    harness = Harness(publication_chunk_routes=40)
    harness.provisioned()
    harness.import_file(THEME_TEST_DATA)
    publisher, queue = harness.publisher(), harness.world.publication_queue
    publisher.process(queue.sent.pop())  # the plan
    first, second = queue.sent[0], queue.sent[1]
    put = harness.world.blobs.put_if_absent

    def refused(*args: Any, **kwargs: Any) -> bool:
        raise TransientError("S3 answered 503 SlowDown", code="s3_slow_down")

    harness.world.blobs.put_if_absent = refused  # type: ignore[method-assign]
    with pytest.raises(TransientError):
        publisher.process(first)
    harness.world.blobs.put_if_absent = put  # type: ignore[method-assign]
    publication = harness.world.publications.get("acme-blog", 2)
    assert publication is not None and publication.retried_steps == 0
    assert publication.last_failure == "chunk 0: S3 answered 503 SlowDown"
    publisher.process(first, receive_count=2)  # it comes again, for the reason it gave
    publisher.process(second, receive_count=3)  # an earlier delivery of this one said nothing: it was stopped
    publication = harness.world.publications.get("acme-blog", 2)
    assert publication is not None and publication.retried_steps == 2
    stopped = "chunk 1: an earlier delivery did not finish (timed out, or its environment stopped)"
    assert publication.last_failure == stopped
