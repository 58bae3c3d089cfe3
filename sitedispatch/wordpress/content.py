"""WordPress's content model as immutable snapshots: site settings, authors, terms, posts, pages, events.

A snapshot serialises to canonical bytes (sorted keys, no whitespace), so the same content always has the same
sha256 — its `revision_id` — and a retry that rebuilds the same content writes the same immutable object.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..model import sha256_hex

PostType = Literal["post", "page", "attachment"]
PostStatus = Literal["publish", "draft", "future", "private", "pending", "trash", "inherit"]
Taxonomy = Literal["category", "post_tag"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


class Post(_Frozen):
    id: int
    guid: str
    type: PostType = "post"
    status: PostStatus = "publish"
    title: str
    slug: str
    content: str = ""
    excerpt: str = ""
    author_id: int = 1
    date_gmt: str
    modified_gmt: str
    term_ids: tuple[int, ...] = ()
    parent: int = 0
    menu_order: int = 0
    comment_count: int = 0
    sticky: bool = False
    meta: dict[str, str] = Field(default_factory=dict)


class ScheduledEvent(_Frozen):
    hook: str
    timestamp: int
    recurrence: str | None = None
    args: tuple[str, ...] = ()


class SiteContent(_Frozen):
    """One immutable snapshot of a site's content."""

    site_id: str
    settings: SiteSettings
    authors: tuple[Author, ...] = ()
    terms: tuple[Term, ...] = ()
    posts: tuple[Post, ...] = ()
    events: tuple[ScheduledEvent, ...] = ()

    def canonical_bytes(self) -> bytes:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode()

    @property
    def revision_id(self) -> str:
        return sha256_hex(self.canonical_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> SiteContent:
        return cls.model_validate_json(data)

    def counts(self) -> dict[str, int]:
        by_type: dict[str, int] = {"post": 0, "page": 0, "attachment": 0}
        for post in self.posts:
            by_type[post.type] += 1
        return {
            "posts": by_type["post"], "pages": by_type["page"], "attachments": by_type["attachment"],
            "terms": len(self.terms), "authors": len(self.authors), "events": len(self.events),
        }


def snapshot_key(site_id: str, revision_id: str) -> str:
    return f"sites/{site_id}/snapshots/{revision_id}.json"


def gmt(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


HELLO_WORLD = (
    "<!-- wp:paragraph -->\n<p>Welcome to WordPress. This is your first post. Edit or delete it, then start "
    "writing!</p>\n<!-- /wp:paragraph -->"
)
SAMPLE_PAGE = (
    "<!-- wp:paragraph -->\n<p>This is an example page. It's different from a blog post because it will stay in one "
    "place and will show up in your site navigation (in most themes). Most people start with an About page that "
    "introduces them to potential site visitors.</p>\n<!-- /wp:paragraph -->"
)


def default_site(site_id: str, *, title: str, url: str, admin_email: str, locale: str, timezone: str,
                 admin_login: str, created_at: float) -> SiteContent:
    """What `wp_install()` leaves behind: the admin, "Uncategorized", "Hello world!", "Sample Page", core events.

    Every timestamp derives from `created_at` (the operation's acceptance time), so a retried provision builds
    byte-identical content.
    """
    when = gmt(created_at)
    day = int(created_at)
    return SiteContent(
        site_id=site_id,
        settings=SiteSettings(title=title, url=url, admin_email=admin_email, locale=locale, timezone=timezone),
        authors=(Author(id=1, login=admin_login, display_name=admin_login, email=admin_email),),
        terms=(Term(id=1, taxonomy="category", slug="uncategorized", name="Uncategorized"),),
        posts=(
            Post(id=1, guid=f"{url}/?p=1", title="Hello world!", slug="hello-world", content=HELLO_WORLD,
                 date_gmt=when, modified_gmt=when, term_ids=(1,), comment_count=1),
            Post(id=2, guid=f"{url}/?page_id=2", type="page", title="Sample Page", slug="sample-page",
                 content=SAMPLE_PAGE, date_gmt=when, modified_gmt=when),
            Post(id=3, guid=f"{url}/?page_id=3", type="page", status="draft", title="Privacy Policy",
                 slug="privacy-policy", date_gmt=when, modified_gmt=when),
        ),
        events=(
            ScheduledEvent(hook="wp_version_check", timestamp=day + 43200, recurrence="twicedaily"),
            ScheduledEvent(hook="wp_update_plugins", timestamp=day + 43200, recurrence="twicedaily"),
            ScheduledEvent(hook="wp_scheduled_delete", timestamp=day + 86400, recurrence="daily"),
            ScheduledEvent(hook="delete_expired_transients", timestamp=day + 86400, recurrence="daily"),
        ),
    )
