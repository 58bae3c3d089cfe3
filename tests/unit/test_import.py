"""`import`: WXR 1.0 to 1.2 streamed, merged by (guid, post id); re-import changes nothing; bad files are permanent."""

from __future__ import annotations

from pathlib import Path

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import Status
from sitedispatch.drivers.reference.content import Manifest, PostRef, default_site
from sitedispatch.drivers.reference.merge import ManifestMerger, Merged
from sitedispatch.drivers.reference.store import ContentStore
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
    with pytest.raises(InvalidInput) as refused:  # at submit: the stored object is not the declared file
        harness.submit(kind="import", params=params, key="before")
    assert refused.value.field == "source_digest" and harness.world.operations.list() != []  # only the provision

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
        with pytest.raises(InvalidInput) as refused:
            harness.submit(kind="import", params=params)
        assert refused.value.field in {"source_key", "input"}
    assert len(harness.world.operations.list()) == before  # nothing written


def test_import_into_an_unprovisioned_site_is_permanent(harness: Harness) -> None:
    result = harness.import_file(FIXTURES / "fixture-1.2.xml", site="bare-site")
    assert result.outcome == Outcome.DEAD and result.reason == "not_provisioned"


def theme_merged(title: str) -> Merged:
    """WordPress's theme test data merged into a new site's defaults (bodies not stored)."""
    from sitedispatch.wxr import parse_wxr

    head, _ = default_site(
        "acme-blog",
        title=title,
        url="https://acme.example",
        admin_email="a@acme.example",
        locale="en_US",
        timezone="UTC",
        admin_login="admin",
        created_at=1_700_000_000.0,
    )
    merger = ManifestMerger(head, lambda body: body.digest)
    with THEME_TEST_DATA.open("rb") as fh:
        for event in parse_wxr(fh):
            merger.add(event)
    return merger.result()


def test_streamed_manifest_has_exactly_the_canonical_bytes_of_the_whole_manifest(harness: Harness) -> None:
    """The import writes its manifest as a stream; the bytes (hence the revision id) must be those of the same
    Manifest serialized whole, or revisions of the same content would differ by how they were written."""

    merged = theme_merged("Acme")
    whole = merged.frame.model_copy(
        update={"posts": tuple(PostRef.model_validate_json(p) for p in merged.canonical_posts())}
    )

    revision_id = ContentStore(harness.world.blobs, "acme-blog").put_manifest_stream(
        merged.frame, merged.canonical_posts()
    )

    assert revision_id == whole.revision_id
    stored = harness.world.blobs.get(f"sites/acme-blog/snapshots/{revision_id}.json")
    assert stored == whole.canonical_bytes() and Manifest.from_bytes(stored) == whole
    assert merged.counts == whole.counts()


@pytest.mark.parametrize("read_bytes", [7, 4096, 256 * 1024])
def test_a_stored_revision_read_as_a_stream_gives_back_its_frame_and_each_post_canonically(
    harness: Harness, read_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The theme test data (unicode titles, quotes) plus a post whose title and summary hold the post list's own
    opening; read in chunks that split multi-byte characters and JSON objects anywhere."""
    from sitedispatch.drivers.reference import store
    from sitedispatch.drivers.reference.merge import stored_posts

    monkeypatch.setattr(store, "READ_BYTES", read_bytes)
    merged = theme_merged('Acme "posts":[ — ünïcode')
    posts = [PostRef.model_validate_json(p) for p in merged.canonical_posts()]
    tricky = posts[0].model_copy(update={"title": '"posts":[{"id":1}] ✓ 日本語', "summary": '\\"posts\\":['})
    whole = merged.frame.model_copy(update={"posts": (tricky, *posts[1:])})
    content = ContentStore(harness.world.blobs, "acme-blog")
    revision = content.put_manifest(whole)

    stream = content.manifest_stream(revision)
    read = list(stream.posts())

    assert [PostRef.model_validate(p) for p in read] == list(whole.posts)
    assert stream.frame() == whole.model_copy(update={"posts": ()})
    stored = stored_posts(iter(read))
    assert len(stored.entries) == len(whole.posts) and stored.bodies == {p.body for p in whole.posts}
    again = ManifestMerger(stream.frame(), lambda body: body.digest, stored).result()
    assert content.put_manifest_stream(again.frame, again.canonical_posts()) == revision  # the same bytes
