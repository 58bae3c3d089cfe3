"""WordPress's content model as immutable, content-addressed snapshots.

A revision is a `Manifest`: site settings, authors, terms, events and one `PostRef` per post (the metadata every
listing needs). Post bodies (content, excerpt, meta) are separate blobs named by their sha256, so a site of any size
is written and read a post at a time and an unchanged post is never rewritten. Canonical bytes (sorted keys, no
whitespace) make `revision_id` = sha256(manifest bytes): the same content always has the same revision.

A site of more than `FLAT_MAX_POSTS` posts is stored in pages: the revision names its pages (`PageRef`: the posts
whose ids fall in one range of `PAGE_IDS`, each page a content-addressed blob) and its key index (store.KeyIndex:
which post each import identity is), and holds no post itself. An import reads and writes only the pages its items
touch; an unchanged page is the next revision's too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from html import unescape
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sitedispatch.domain.model import sha256_hex

PostStatus = Literal["publish", "draft", "future", "private", "pending", "trash", "inherit"]
Taxonomy = Literal["category", "post_tag"]
SUMMARY_CHARS = 280
PAGE_IDS = 1024  # page n holds the posts with ids n * PAGE_IDS .. (n + 1) * PAGE_IDS - 1
FLAT_MAX_POSTS = 2048  # a revision with more posts is stored in pages (read at each write: tests lower it)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def canonical_bytes(self) -> bytes:
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()


class SiteSettings(_Frozen):
    title: str
    tagline: str = "Just another WordPress site"
    url: str
    admin_email: str
    locale: str = "en_US"
    timezone: str = "UTC"
    date_format: str = "F j, Y"
    permalink_structure: str = "/%year%/%monthnum%/%day%/%postname%/"
    posts_per_page: int = 10


class Author(_Frozen):
    id: int
    login: str
    display_name: str
    email: str = ""


class Term(_Frozen):
    id: int
    taxonomy: Taxonomy
    slug: str
    name: str
    parent: int = 0
    description: str = ""


class PostBody(_Frozen):
    """What a single view needs beyond the listing metadata; stored once per distinct content."""

    content: str = ""
    excerpt: str = ""
    meta: dict[str, str] = Field(default_factory=dict)

    @property
    def digest(self) -> str:
        return sha256_hex(self.canonical_bytes())


class PostRef(_Frozen):
    id: int
    guid: str
    type: str = "post"
    status: PostStatus = "publish"
    title: str
    slug: str
    author_id: int = 1
    date_gmt: str
    modified_gmt: str
    term_ids: tuple[int, ...] = ()
    parent: int = 0
    menu_order: int = 0
    comment_count: int = 0
    sticky: bool = False
    protected: bool = False
    summary: str = ""
    body: str  # sha256 of the PostBody blob
    source_id: int = 0  # the WXR post id it was imported from (0: created here); with guid, its import identity


class ScheduledEvent(_Frozen):
    hook: str
    timestamp: int
    recurrence: str | None = None
    args: tuple[str, ...] = ()


class PageRef(_Frozen):
    """One page of a paged revision: its blob and what its posts hold (summed for the revision's counts)."""

    number: int
    digest: str  # sha256 of the page's bytes
    count: int
    types: dict[str, int]
    comments: int
    next_due_at: float | None = None  # its earliest `future` post's time


class Manifest(_Frozen):
    """One revision of a site: its posts in the document (`posts`), or, for a large site, in pages (`pages` and
    `index` set, `posts` empty: `store.ContentStore.manifest` reads them back in)."""

    site_id: str
    settings: SiteSettings
    authors: tuple[Author, ...] = ()
    terms: tuple[Term, ...] = ()
    posts: tuple[PostRef, ...] = ()
    events: tuple[ScheduledEvent, ...] = ()
    pages: tuple[PageRef, ...] = ()
    index: str | None = None  # a paged revision's key index (its blob's digest)

    def canonical_bytes(self) -> bytes:
        """A revision in one document has the bytes it had before pages existed (the same content, the same id)."""
        document = self.model_dump(mode="json")
        if not self.pages:
            del document["pages"], document["index"]
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def revision_id(self) -> str:
        return sha256_hex(self.canonical_bytes())

    @property
    def paged(self) -> bool:
        return bool(self.pages)

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        return cls.model_validate_json(data)

    def next_due_at(self) -> float | None:
        """When WordPress's cron next has work here: the earliest scheduled event or `future` post."""
        if self.paged:
            times = [float(e.timestamp) for e in self.events] + [
                p.next_due_at for p in self.pages if p.next_due_at is not None
            ]
            return min(times, default=None)
        return earliest_due(self.events, self.posts)

    def counts(self) -> dict[str, int]:
        if self.paged:
            types: dict[str, int] = {}
            for page in self.pages:
                for kind, n in page.types.items():
                    types[kind] = types.get(kind, 0) + n
            return content_counts(
                types,
                sum(p.comments for p in self.pages),
                terms=len(self.terms),
                authors=len(self.authors),
                events=len(self.events),
            )
        return content_counts(
            _by_type(p.type for p in self.posts),
            sum(p.comment_count for p in self.posts),
            terms=len(self.terms),
            authors=len(self.authors),
            events=len(self.events),
        )

    @property
    def post_count(self) -> int:
        return sum(p.count for p in self.pages) if self.paged else len(self.posts)

    def normalised(self) -> Manifest:
        """Sorted collections: the same content in any insertion order has the same bytes."""
        return self.model_copy(
            update={
                "authors": tuple(sorted(self.authors, key=lambda a: a.id)),
                "terms": tuple(sorted(self.terms, key=lambda t: t.id)),
                "posts": tuple(sorted(self.posts, key=lambda p: p.id)),
                "events": tuple(sorted(self.events, key=lambda e: (e.timestamp, e.hook, e.args))),
                "pages": tuple(sorted(self.pages, key=lambda p: p.number)),
            }
        )


def earliest_due(events: Iterable[ScheduledEvent], posts: Iterable[PostRef]) -> float | None:
    times = [float(e.timestamp) for e in events]
    times += [parse_gmt(p.date_gmt) for p in posts if p.status == "future"]
    return min(times, default=None)


def _by_type(types: Iterable[str]) -> dict[str, int]:
    by_type: dict[str, int] = {}
    for kind in types:
        by_type[kind] = by_type.get(kind, 0) + 1
    return by_type


def content_counts(by_type: dict[str, int], comments: int, *, terms: int, authors: int, events: int) -> dict[str, int]:
    """What a revision holds, by kind of post; the summary every content-changing commit records."""
    return {
        "posts": by_type.get("post", 0),
        "pages": by_type.get("page", 0),
        "attachments": by_type.get("attachment", 0),
        "other": sum(n for t, n in by_type.items() if t not in {"post", "page", "attachment"}),
        "terms": terms,
        "authors": authors,
        "events": events,
        "comments": comments,
    }


def body_key(site_id: str, digest: str) -> str:
    return f"sites/{site_id}/objects/{digest}.json"


def page_key(site_id: str, digest: str) -> str:
    return f"sites/{site_id}/pages/{digest}.json"


def index_key(site_id: str, digest: str) -> str:
    return f"sites/{site_id}/index/{digest}.bin"


def gmt(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def parse_gmt(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


_TAGS = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def summarise(body: PostBody) -> str:
    """Plain-text excerpt for listings and feeds: the excerpt if given, else the content's first words."""
    text = body.excerpt or body.content
    plain = _SPACE.sub(" ", unescape(_TAGS.sub(" ", text))).strip()
    return plain if len(plain) <= SUMMARY_CHARS else plain[:SUMMARY_CHARS].rsplit(" ", 1)[0] + "…"


HELLO_WORLD = (
    "<!-- wp:paragraph -->\n<p>Welcome to WordPress. This is your first post. Edit or delete it, then start "
    "writing!</p>\n<!-- /wp:paragraph -->"
)
SAMPLE_PAGE = (
    "<!-- wp:paragraph -->\n<p>This is an example page. It's different from a blog post because it will stay in one "
    "place and will show up in your site navigation (in most themes). Most people start with an About page that "
    "introduces them to potential site visitors.</p>\n<!-- /wp:paragraph -->"
)


def default_site(
    site_id: str,
    *,
    title: str,
    url: str,
    admin_email: str,
    locale: str,
    timezone: str,
    admin_login: str,
    created_at: float,
) -> tuple[Manifest, list[PostBody]]:
    """What `wp_install()` leaves behind: the admin, "Uncategorized", "Hello world!", "Sample Page", core events.

    Every timestamp derives from `created_at` (the operation's acceptance time), so a retried provision builds
    byte-identical content.
    """
    when = gmt(created_at)
    day = int(created_at)
    bodies = [PostBody(content=HELLO_WORLD), PostBody(content=SAMPLE_PAGE), PostBody()]
    specs = [
        dict(id=1, guid=f"{url}/?p=1", title="Hello world!", slug="hello-world", term_ids=(1,), comment_count=1),
        dict(id=2, guid=f"{url}/?page_id=2", type="page", title="Sample Page", slug="sample-page"),
        dict(
            id=3, guid=f"{url}/?page_id=3", type="page", status="draft", title="Privacy Policy", slug="privacy-policy"
        ),
    ]
    posts = tuple(
        PostRef(
            **spec,  # type: ignore[arg-type]
            date_gmt=when,
            modified_gmt=when,
            body=body.digest,
            summary=summarise(body),
        )
        for spec, body in zip(specs, bodies, strict=True)
    )
    manifest = Manifest(
        site_id=site_id,
        settings=SiteSettings(title=title, url=url, admin_email=admin_email, locale=locale, timezone=timezone),
        authors=(Author(id=1, login=admin_login, display_name=admin_login, email=admin_email),),
        terms=(Term(id=1, taxonomy="category", slug="uncategorized", name="Uncategorized"),),
        posts=posts,
        events=(
            ScheduledEvent(hook="wp_version_check", timestamp=day + 43200, recurrence="twicedaily"),
            ScheduledEvent(hook="wp_update_plugins", timestamp=day + 43200, recurrence="twicedaily"),
            ScheduledEvent(hook="wp_scheduled_delete", timestamp=day + 86400, recurrence="daily"),
            ScheduledEvent(hook="delete_expired_transients", timestamp=day + 86400, recurrence="daily"),
        ),
    )
    return manifest.normalised(), bodies
