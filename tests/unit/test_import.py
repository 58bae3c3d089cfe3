"""`import`: WXR 1.0 to 1.2 streamed, merged by (guid, post id); re-import changes nothing; bad files are permanent."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import Conflict, NotFound
from sitedispatch.domain.model import Status
from sitedispatch.drivers.reference import content
from sitedispatch.drivers.reference.content import Manifest, default_site
from sitedispatch.drivers.reference.store import ContentStore
from tests.fakes import MemoryBlobStore
from tests.unit.conftest import FIXTURES, THEME_TEST_DATA, Harness


def head(harness: Harness, site: str = "acme-blog") -> Manifest:
    record = harness.world.sites.get(site)
    assert record is not None and record.head_revision
    return ContentStore(harness.world.blobs, site).manifest(record.head_revision)


def test_wordpress_theme_unit_test_data_imports_whole_and_reimports_as_no_change(harness: Harness) -> None:
    harness.provisioned()

    first = harness.import_file(THEME_TEST_DATA, key="first")

    assert first.outcome == Outcome.SUCCEEDED
    manifest = head(harness)
    summary = first.commit.summary  # type: ignore[union-attr]
    # 186 items, of which 18 are menu items listed twice (same guid and id): 168 distinct items
    assert summary["items"] == 186
    assert summary["created"] == {"post": 58, "page": 21, "attachment": 37, "nav_menu_item": 52}
    assert summary["comments"] == 30
    assert manifest.counts()["posts"] == 59 and manifest.counts()["pages"] == 23  # with provision's defaults
    assert len({p.id for p in manifest.posts}) == len(manifest.posts)
    titles = {p.title for p in manifest.posts}
    assert {"Template: Sticky", 'Template: Password Protected (the password is "enter")'} <= titles
    assert any(p.protected for p in manifest.posts) and any(p.sticky for p in manifest.posts)

    again = harness.import_file(THEME_TEST_DATA, key="again")

    assert again.outcome == Outcome.SUCCEEDED
    assert again.commit.revision_id == first.commit.revision_id  # type: ignore[union-attr]
    assert again.commit.summary["created"] == {} and again.commit.summary["updated"] == {}  # type: ignore[union-attr]
    assert again.commit.summary["bodies_written"] == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_every_wxr_version_imports_posts_pages_drafts_future_attachments_and_unicode(
    harness: Harness, version: str
) -> None:
    harness.provisioned()

    result = harness.import_file(FIXTURES / f"fixture-{version}.xml")

    assert result.outcome == Outcome.SUCCEEDED
    manifest = head(harness)
    by_guid = {p.guid: p for p in manifest.posts}
    published = by_guid["https://fixture.example/?p=10"]
    assert published.title == "Published post — ünïcödé" and published.sticky and published.comment_count == 1
    assert by_guid["https://fixture.example/?p=11"].status == "draft"
    assert by_guid["https://fixture.example/?p=12"].status == "future"
    team = by_guid["https://fixture.example/?page_id=21"]
    assert team.parent == by_guid["https://fixture.example/?page_id=20"].id
    logo = by_guid["https://fixture.example/wp-content/uploads/logo.png"]
    assert logo.type == "attachment" and logo.parent == published.id
    terms = {(t.taxonomy, t.slug): t for t in manifest.terms}
    assert terms[("category", "local-news")].parent == terms[("category", "news")].id
    assert terms[("post_tag", "café")].name == "Café ☕"
    assert {terms[("category", "local-news")].id, terms[("post_tag", "café")].id} == set(published.term_ids)
    body = ContentStore(harness.world.blobs, "acme-blog").body(published.body)
    assert "日本語" in body.content and "a ]]> split CDATA" in body.content
    assert body.meta == {"subtitle": "Sub"} and body.excerpt == "A short excerpt"
    authors = {a.login for a in manifest.authors}
    assert "editor" in authors


@pytest.mark.parametrize(
    ("fixture", "code", "says"),
    [
        ("malformed.xml", "wxr_malformed", "line 59"),
        ("truncated.xml", "wxr_malformed", "line"),
        ("latin1.xml", "wxr_malformed", "line 13, column 24"),  # the byte 0xff in the first title
        ("billion-laughs.xml", "wxr_unsafe", "unsafe"),
        ("external-entity.xml", "wxr_unsafe", "unsafe"),
        ("wrong-version.xml", "wxr_version", "2.0"),
    ],
)
def test_bad_files_are_permanent_failures_that_say_where_and_what(
    harness: Harness, fixture: str, code: str, says: str
) -> None:
    harness.provisioned()
    before = harness.world.sites.get("acme-blog").head_revision  # type: ignore[union-attr]

    result = harness.import_file(FIXTURES / fixture)

    assert result.outcome == Outcome.DEAD and result.reason == code
    op = harness.world.operations.list(status=Status.DEAD)[0]
    assert op.attempt == 1 and says in op.error.message  # type: ignore[union-attr]
    assert harness.world.sites.get("acme-blog").head_revision == before  # type: ignore[union-attr]


def test_a_file_changed_after_staging_is_refused_by_its_digest(harness: Harness, tmp_path: Path) -> None:
    harness.provisioned()
    params = harness.submitter.stage_upload("acme-blog", FIXTURES / "fixture-1.2.xml", "tenant-a")
    original = harness.world.blobs.objects[params["source_key"]]
    harness.world.blobs.objects[params["source_key"]] = original + b"<!-- tampered -->"
    with pytest.raises(Conflict) as refused:  # at submit: the stored object is not the declared file
        harness.submit(kind="import", params=params, key="before")
    assert "not the declared" in str(refused.value) and harness.world.operations.list() != []  # only the provision

    harness.world.blobs.objects[params["source_key"]] = original
    op_id = harness.submit(kind="import", params=params, key="after")
    harness.world.blobs.objects[params["source_key"]] = original + b"<!-- tampered -->"  # after the submit
    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.DEAD and result.reason == "digest_mismatch"


def test_an_import_names_only_its_own_principals_upload_for_that_site(harness: Harness) -> None:
    harness.provisioned()
    harness.provisioned("other-site")
    theirs = harness.submitter.stage_upload("acme-blog", FIXTURES / "fixture-1.2.xml", "tenant-b")
    other_site = harness.submitter.stage_upload("other-site", FIXTURES / "fixture-1.2.xml", "tenant-a")
    before = len(harness.world.operations.list())
    for params in (theirs, other_site, {**theirs, "source_key": theirs["source_key"].replace("acme", "acmx")}):
        with pytest.raises(NotFound, match="not an upload of yours"):
            harness.submit(kind="import", params=params)
    assert len(harness.world.operations.list()) == before  # nothing written


def test_import_into_a_registered_site_never_provisioned_is_permanent(harness: Harness) -> None:
    result = harness.import_file(FIXTURES / "fixture-1.2.xml", site=harness.registered("bare-site"))
    assert result.outcome == Outcome.DEAD and result.reason == "not_provisioned"


@pytest.mark.parametrize("kind", ["import", "publish", "wp_cron", "recover"])
def test_work_for_a_site_never_registered_is_refused_at_submit_and_writes_nothing(harness: Harness, kind: str) -> None:
    from sitedispatch.domain.errors import NotFound

    params: dict[str, object] = {"revision_id": "a" * 64} if kind == "recover" else {}
    if kind == "import":
        params = harness.submitter.stage_upload("acme-blgo", FIXTURES / "fixture-1.2.xml", "tenant-a")
    operations, sites, sent = (
        dict(harness.world.db.operations),
        dict(harness.world.db.sites),
        len(harness.world.queue.sent),
    )
    with pytest.raises(NotFound, match="site acme-blgo is not registered: a site's first operation is a provision"):
        harness.submitter.submit(kind=kind, site_id="acme-blgo", principal="tenant-a", params=params)
    assert harness.world.db.operations == operations and harness.world.db.sites == sites
    assert len(harness.world.queue.sent) == sent and harness.world.sites.get("acme-blgo") is None


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 16 ids and a site in pages past 20 posts: the theme test data (171 posts) spans 14 pages."""
    monkeypatch.setattr(content, "PAGE_IDS", 16)
    monkeypatch.setattr(content, "FLAT_MAX_POSTS", 20)


class CountingBlobs(MemoryBlobStore):
    """Counts reads and writes by the kind of object (the key's third part: snapshots, pages, index, objects)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()

    def get(self, key: str) -> bytes:
        self.reads[key.split("/")[2]] += 1
        return super().get(key)

    def put_if_absent(self, key: str, body: Any, content_type: str = "application/json", sha256: Any = None) -> bool:
        self.writes[key.split("/")[2]] += 1
        return super().put_if_absent(key, body, content_type, sha256)


def merged_theme(store: ContentStore) -> Manifest:
    """WordPress's theme test data merged into a new site's defaults (bodies stored), read back whole."""
    from sitedispatch.drivers.reference.merge import ManifestMerger
    from sitedispatch.wxr import parse_wxr

    base, bodies = default_site(
        "acme-blog",
        title="Acme",
        url="https://acme.example",
        admin_email="a@acme.example",
        locale="en_US",
        timezone="UTC",
        admin_login="admin",
        created_at=1_700_000_000.0,
    )
    for body in bodies:
        store.put_body(body)
    merger = ManifestMerger(store, base, store.put_body)
    with THEME_TEST_DATA.open("rb") as fh:
        for event in parse_wxr(fh):
            merger.add(event)
    return store.manifest(merger.result().revision_id)


def test_a_large_site_is_stored_in_pages_and_reads_back_as_the_same_manifest(small_pages: None) -> None:
    blobs = CountingBlobs()
    store = ContentStore(blobs, "acme-blog")
    whole = merged_theme(store)
    flat_bytes = whole.canonical_bytes()

    revision = store.put_manifest(whole)
    frame = store.stored_manifest(revision)

    assert frame.paged and frame.posts == () and frame.index is not None
    assert [p.number for p in frame.pages] == sorted({p.id // 16 for p in whole.posts})
    assert sum(p.count for p in frame.pages) == len(whole.posts)
    assert store.manifest(revision) == whole and whole.canonical_bytes() == flat_bytes  # the same posts read back
    assert frame.counts() == whole.counts() and frame.next_due_at() == whole.next_due_at()
    writes = sum(blobs.writes.values())
    assert store.put_manifest(store.manifest(revision), frame.pages) == revision  # the same content, the same id
    assert sum(blobs.writes.values()) == writes + 2  # its pages known: the index and the frame, refused as present


def test_a_small_site_stays_one_document_with_the_bytes_it_had_before_pages() -> None:
    store = ContentStore(MemoryBlobStore(), "acme-blog")
    whole = merged_theme(store)

    revision = store.put_manifest(whole)

    assert revision == whole.revision_id and not store.stored_manifest(revision).paged
    document = json.loads(store.blobs.get(f"sites/acme-blog/snapshots/{revision}.json"))
    assert "pages" not in document and "index" not in document


def test_an_import_into_a_paged_site_reads_and_writes_only_the_pages_its_items_touch(
    small_pages: None, tmp_path: Path
) -> None:
    """Ten new posts (WXR ids 5001-5010) into the theme site in pages: one new page (and a second, for the ids past
    its end), the index and the frame written; of the 14 pages, only the last is read (the next free id)."""
    from sitedispatch.drivers.reference.merge import ManifestMerger
    from sitedispatch.local.synthetic import write_wxr
    from sitedispatch.wxr import parse_wxr

    blobs = CountingBlobs()
    store = ContentStore(blobs, "acme-blog")
    site = store.put_manifest(merged_theme(store))
    before = store.stored_manifest(site)
    wxr = tmp_path / "ten.xml"
    write_wxr(wxr, posts=10, seed=5, first_id=5001)
    blobs.reads.clear()
    blobs.writes.clear()

    merger = ManifestMerger(store, before, lambda body: body.digest)
    with wxr.open("rb") as fh:
        for event in parse_wxr(fh):
            merger.add(event)
    stored = merger.result()

    after = stored.manifest
    assert merger.tally.created == {"post": 10} and after.post_count == before.post_count + 10
    new_pages = {p.number for p in after.pages} - {p.number for p in before.pages}
    assert new_pages == {5001 // 16, 5010 // 16}
    assert [p for p in after.pages if p.number not in new_pages] == list(before.pages)  # every other page reused
    assert blobs.writes == {"pages": 2, "index": 1, "snapshots": 1}
    assert blobs.reads == {"index": 1, "pages": 1}  # the base frame was read before counting
    again = ManifestMerger(store, after, lambda body: body.digest)
    with wxr.open("rb") as fh:
        for event in parse_wxr(fh):
            again.add(event)
    assert again.tally.unchanged == {"post": 10} and again.result().revision_id == stored.revision_id


def test_identities_sharing_a_key_hash_are_told_apart_by_the_post_itself(
    small_pages: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every identity hashed to one value (a 64-bit collision, everywhere at once): the merge still finds each
    item's own post, a re-import changes nothing, and the index's bytes do not depend on the order it was built in."""
    from sitedispatch.drivers.reference import merge
    from sitedispatch.drivers.reference import store as store_module
    from sitedispatch.drivers.reference.store import KeyIndex

    monkeypatch.setattr(merge, "key_hash", lambda guid, source_id: 7)
    monkeypatch.setattr(store_module, "key_hash", lambda guid, source_id: 7)
    store = ContentStore(MemoryBlobStore(), "acme-blog")
    whole = merged_theme(store)
    revision = store.put_manifest(whole)

    again = merge.ManifestMerger(store, store.stored_manifest(revision), store.put_body)
    with THEME_TEST_DATA.open("rb") as fh:
        from sitedispatch.wxr import parse_wxr

        for event in parse_wxr(fh):
            again.add(event)

    assert again.tally.created == {} and sum(again.tally.unchanged.values()) == again.tally.items
    built = KeyIndex.of([(5, 1), (5, 3), (9, 1)])
    built.add(5, 2)
    assert built.to_bytes() == KeyIndex.of([(5, 1), (5, 2), (5, 3), (9, 1)]).to_bytes()


def test_an_input_kept_out_of_the_row_is_not_stored_for_a_site_never_registered(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sitedispatch.domain.errors import NotFound
    from sitedispatch.operations import submission

    monkeypatch.setattr(submission, "INLINE_INPUT_BYTES", 0)  # every input goes to S3
    blobs = dict(harness.world.blobs.objects)
    with pytest.raises(NotFound, match="site acme-blgo is not registered"):
        harness.submitter.submit(kind="wp_cron", site_id="acme-blgo", principal="tenant-a", params={})
    assert harness.world.blobs.objects == blobs  # no orphan input
    harness.registered("acme-blgo")
    harness.submitter.submit(kind="wp_cron", site_id="acme-blgo", principal="tenant-a", params={})
    assert len(harness.world.blobs.objects) == len(blobs) + 1  # registered: the input is kept
