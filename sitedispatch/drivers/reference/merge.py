"""Merging a WXR stream into a site's manifest: keyed by (guid, WXR post id) for posts, login for authors,
taxonomy+slug for terms, so a re-import updates in place and never duplicates.

Real exports repeat guids (WordPress's own theme test data has two different posts sharing one guid, and menu items
listed twice), so the guid alone does not identify an item; with the WXR post id it does."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.drivers.reference.content import (
    Author,
    Manifest,
    PostBody,
    PostRef,
    Term,
    content_counts,
    parse_gmt,
    summarise,
)
from sitedispatch.wxr import WxrAuthor, WxrEvent, WxrItem, WxrTerm

TAXONOMIES = {"category", "post_tag"}
STATUSES = {"publish", "draft", "future", "private", "pending", "trash", "inherit"}


@dataclass
class ImportTally:
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    terms_created: int = 0
    authors_created: int = 0
    comments: int = 0
    items: int = 0

    def bump(self, bucket: dict[str, int], kind: str) -> None:
        bucket[kind] = bucket.get(kind, 0) + 1

    def as_dict(self) -> dict[str, object]:
        return {
            "items": self.items,
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "terms_created": self.terms_created,
            "authors_created": self.authors_created,
            "comments": self.comments,
        }


@dataclass(frozen=True)
class Merged:
    """The merge's outcome, ready to stream: the manifest without its posts, the posts (compressed canonical bytes,
    in id order; `canonical_posts()` yields them plain) and what the revision holds."""

    frame: Manifest
    packed_posts: list[bytes]
    counts: dict[str, int]

    def canonical_posts(self) -> Iterator[bytes]:
        return (zlib.decompress(data) for data in self.packed_posts)


# One post while merging, kept compact: (id, type, approved comments, zlib-compressed canonical PostRef bytes).
# A pydantic PostRef per post costs several times its serialized size, and a 100 MB export holds ~33,000 posts:
# compressed entries keep the whole index near 10 MB.
Entry = tuple[int, str, int, bytes]


def _pack(ref: PostRef) -> bytes:
    return zlib.compress(ref.canonical_bytes(), 1)


def _unpack(data: bytes) -> PostRef:
    return PostRef.model_validate_json(zlib.decompress(data))


def _packed_json(post: dict[str, Any]) -> bytes:
    """A stored post's canonical bytes, packed, straight from its parsed JSON (no PostRef built: the stored bytes
    are canonical, and dumping them again the same way gives the same bytes)."""
    return zlib.compress(json.dumps(post, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(), 1)


@dataclass
class StoredPosts:
    """A stored revision's posts as the merge keeps them, read one at a time (`stored_posts`)."""

    entries: dict[tuple[str, int], Entry] = field(default_factory=dict)
    bodies: set[str] = field(default_factory=set)  # the bodies they hold: not written again
    next_due_at: float | None = None  # the earliest `future` post's time


def stored_posts(posts: Iterable[dict[str, Any]]) -> StoredPosts:
    """Each post as parsed from a stored revision's canonical JSON (store.StreamedManifest), packed at once."""
    out = StoredPosts()
    for post in posts:
        out.entries[(str(post["guid"]), int(post["source_id"]))] = (
            int(post["id"]),
            str(post["type"]),
            int(post["comment_count"]),
            _packed_json(post),
        )
        out.bodies.add(str(post["body"]))
        if post["status"] == "future":
            due = parse_gmt(str(post["date_gmt"]))
            out.next_due_at = due if out.next_due_at is None else min(out.next_due_at, due)
    return out


class ManifestMerger:
    """Accumulates a WXR stream on top of `head`. Bodies are handed to `write_body` as they come (never kept)."""

    def __init__(
        self, head: Manifest, write_body: Callable[[PostBody], str], stored: StoredPosts | None = None
    ) -> None:
        """`stored`: the head's posts as read from its stored revision (`head` is then its frame, without posts):
        the merge never holds them as PostRefs."""
        self.head = head
        self.write_body = write_body
        self.authors = {a.login: a for a in head.authors}
        self.terms: dict[tuple[str, str], Term] = {(t.taxonomy, t.slug): t for t in head.terms}
        self.term_parents: dict[tuple[str, str], str] = {}
        self.posts: dict[tuple[str, int], Entry] = {
            (p.guid, p.source_id): (p.id, p.type, p.comment_count, _pack(p)) for p in head.posts
        }
        # Early is harmless (a wp_cron that finds nothing due changes nothing), late would miss work: keep the
        # earliest of the head's and every imported `future` post's times.
        self.next_due_at = head.next_due_at()
        if stored is not None:
            self.posts.update(stored.entries)
            if stored.next_due_at is not None:
                self.next_due_at = min(stored.next_due_at, self.next_due_at or stored.next_due_at)
        self.ids = {entry[0] for entry in self.posts.values()}
        self.wxr_to_id: dict[int, int] = {}
        self.parent_wxr: dict[tuple[str, int], int] = {}
        self.tally = ImportTally()

    def state(self) -> dict[str, object]:
        """What `result()` needs beyond the manifest it produced so far, for a later step to continue the merge: the
        WXR ids seen, the parents still to resolve (WXR ids may point forward), the terms' parents, the tally."""
        return {
            "wxr_to_id": [[wxr, post] for wxr, post in self.wxr_to_id.items()],
            "parent_wxr": [[guid, wxr, parent] for (guid, wxr), parent in self.parent_wxr.items()],
            "term_parents": [[tax, slug, parent] for (tax, slug), parent in self.term_parents.items()],
            "tally": self.tally.as_dict(),
            "next_due_at": self.next_due_at,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue a merge whose `state()` was saved with the manifest it had produced (this merger's head)."""
        self.wxr_to_id = {int(wxr): int(post) for wxr, post in state["wxr_to_id"]}
        self.parent_wxr = {(str(guid), int(wxr)): int(parent) for guid, wxr, parent in state["parent_wxr"]}
        self.term_parents = {(str(tax), str(slug)): str(parent) for tax, slug, parent in state["term_parents"]}
        self.tally = ImportTally(**state["tally"])
        self.next_due_at = state["next_due_at"]

    def add(self, event: WxrEvent) -> None:
        if isinstance(event, WxrAuthor):
            self._author(event.login, event.email, event.display_name)
        elif isinstance(event, WxrTerm):
            if event.taxonomy in TAXONOMIES and event.slug:
                self._term(event.taxonomy, event.slug, event.name, event.description)
                if event.parent_slug:
                    self.term_parents[(event.taxonomy, event.slug)] = event.parent_slug
        else:
            self._item(event)

    def _author(self, login: str, email: str = "", display_name: str = "") -> Author:
        author = self.authors.get(login)
        if author is None:
            author = Author(
                id=max((a.id for a in self.authors.values()), default=0) + 1,
                login=login,
                display_name=display_name or login,
                email=email,
            )
            self.authors[login] = author
            self.tally.authors_created += 1
        return author

    def _term(self, taxonomy: str, slug: str, name: str, description: str = "") -> Term:
        key = (taxonomy, slug)
        term = self.terms.get(key)
        if term is None:
            term = Term(
                id=max((t.id for t in self.terms.values()), default=0) + 1,
                taxonomy=taxonomy,  # type: ignore[arg-type]
                slug=slug,
                name=name or slug,
                description=description,
            )
            self.terms[key] = term
            self.tally.terms_created += 1
        return term

    def _item(self, item: WxrItem) -> None:
        self.tally.items += 1
        self.tally.comments += item.comment_count
        key = (item.guid, item.wxr_id)
        existing = self.posts.get(key)
        if existing is not None:
            post_id = existing[0]
        elif item.wxr_id > 0 and item.wxr_id not in self.ids:
            post_id = item.wxr_id
        else:
            post_id = max(self.ids, default=0) + 1
        self.ids.add(post_id)
        if item.wxr_id:
            self.wxr_to_id[item.wxr_id] = post_id
        if item.parent_wxr_id:
            self.parent_wxr[key] = item.parent_wxr_id
        body = PostBody(content=item.content, excerpt=item.excerpt, meta=item.meta)
        term_ids = tuple(
            sorted({self._term(tax, slug, name).id for tax, slug, name in item.terms if tax in TAXONOMIES and slug})
        )
        author = self._author(item.author_login) if item.author_login else None
        ref = PostRef(
            id=post_id,
            guid=item.guid,
            type=item.type,
            status=item.status if item.status in STATUSES else "draft",  # type: ignore[arg-type]
            title=item.title,
            slug=item.slug,
            author_id=author.id if author else 1,
            date_gmt=item.date_gmt,
            modified_gmt=item.date_gmt,
            term_ids=term_ids,
            parent=_unpack(existing[3]).parent if existing else 0,
            menu_order=item.menu_order,
            comment_count=item.comment_count,
            sticky=item.sticky,
            protected=item.protected,
            summary=summarise(body),
            body=self.write_body(body),
            source_id=item.wxr_id,
        )
        if ref.status == "future":
            due = parse_gmt(ref.date_gmt)
            self.next_due_at = due if self.next_due_at is None else min(self.next_due_at, due)
        data = _pack(ref)
        if existing is None:
            self.tally.bump(self.tally.created, item.type)
        elif existing[3] == data:
            self.tally.bump(self.tally.unchanged, item.type)
        else:
            self.tally.bump(self.tally.updated, item.type)
        self.posts[key] = (post_id, ref.type, ref.comment_count, data)

    def result(self) -> Merged:
        """Parents resolved (WXR ids may point forward), terms re-parented, posts in id order."""
        for key, parent_wxr in self.parent_wxr.items():
            post_id, kind, comments, data = self.posts[key]
            parent = self.wxr_to_id.get(parent_wxr, 0)
            ref = _unpack(data)
            if ref.parent != parent:
                self.posts[key] = (post_id, kind, comments, _pack(ref.model_copy(update={"parent": parent})))
        terms = []
        for term_key, term in self.terms.items():
            parent_slug = self.term_parents.get(term_key)
            if parent_slug and (term_key[0], parent_slug) in self.terms:
                term = term.model_copy(update={"parent": self.terms[(term_key[0], parent_slug)].id})
            terms.append(term)
        frame = self.head.model_copy(
            update={
                "authors": tuple(self.authors.values()),
                "terms": tuple(terms),
                "posts": (),
            }
        ).normalised()
        entries = sorted(self.posts.values(), key=lambda entry: entry[0])
        counts = content_counts(
            [e[1] for e in entries],
            sum(e[2] for e in entries),
            terms=len(frame.terms),
            authors=len(frame.authors),
            events=len(frame.events),
        )
        return Merged(frame, [e[3] for e in entries], counts)
