"""Merging a WXR stream into a site's manifest: keyed by (guid, WXR post id) for posts, login for authors,
taxonomy+slug for terms, so a re-import updates in place and never duplicates.

Real exports repeat guids (WordPress's own theme test data has two different posts sharing one guid, and menu items
listed twice), so the guid alone does not identify an item; with the WXR post id it does.

The merge holds what its step touches, not the site: an item's post is found through the revision's key index
(16 bytes a post) and read from its page; the pages an item changes are kept until the step is stored, the others
are read when needed and forgotten (a few are cached). What it carries across the whole import is small: the WXR
ids seen (8 bytes each), those whose post has another id, the parents not yet seen, the tally."""

from __future__ import annotations

import base64
import bisect
import json
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.drivers.reference import content
from sitedispatch.drivers.reference.content import Author, Manifest, PageRef, PostBody, PostRef, Term, summarise
from sitedispatch.drivers.reference.store import (
    ContentStore,
    KeyIndex,
    Page,
    from_little_endian,
    key_hash,
    little_endian,
    paged,
)
from sitedispatch.wxr import WxrAuthor, WxrEvent, WxrItem, WxrTerm

CACHED_PAGES = 16  # pages read and unchanged, kept in case the next items need them (sequential ids mostly do)

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


class SortedInts:
    """A set of integers as a sorted array (8 bytes each) and what was added since it was last folded."""

    def __init__(self, values: array[int] | None = None) -> None:
        self.values = values if values is not None else array("q")
        self.added: set[int] = set()

    def __contains__(self, n: int) -> bool:
        if n in self.added:
            return True
        at = bisect.bisect_left(self.values, n)
        return at < len(self.values) and self.values[at] == n

    def add(self, n: int) -> None:
        if n not in self:
            self.added.add(n)

    def fold(self) -> None:
        if self.added:
            self.values = array("q", sorted([*self.values, *self.added]))
            self.added.clear()

    def to_text(self) -> str:
        self.fold()
        return base64.b64encode(zlib.compress(little_endian(self.values), 6)).decode()

    @classmethod
    def from_text(cls, text: str) -> SortedInts:
        return cls(from_little_endian("q", zlib.decompress(base64.b64decode(text))))


@dataclass(frozen=True)
class Stored:
    """A revision the merge stored: its id and its document (a paged one's without posts)."""

    revision_id: str
    manifest: Manifest


class ManifestMerger:
    """Accumulates a WXR stream on top of the revision `base` (as stored: a paged one's frame). Bodies are handed to
    `write_body` as they come (never kept); `store()` writes what the merge changed as a revision."""

    def __init__(self, store: ContentStore, base: Manifest, write_body: Callable[[PostBody], str]) -> None:
        self.site_content = store
        self.head = base
        self.write_body = write_body
        self.authors = {a.login: a for a in base.authors}
        self.terms: dict[tuple[str, str], Term] = {(t.taxonomy, t.slug): t for t in base.terms}
        self.term_parents: dict[tuple[str, str], str] = {}
        self.refs: dict[int, PageRef] = {ref.number: ref for ref in base.pages}
        self.clean: OrderedDict[int, Page] = OrderedDict()
        # A revision in one document is small: its pages are built here and written only if the result is paged.
        self.dirty: dict[int, Page] = paged(base.posts)
        self.index = (
            store.key_index(base)
            if base.paged
            else KeyIndex.of((key_hash(p.guid, p.source_id), p.id) for p in base.posts)
        )
        self.index_digest = base.index
        numbers = set(self.refs) | set(self.dirty)
        self.max_id = max(self._page(max(numbers)), default=0) if numbers else 0
        self.wxr_seen = SortedInts()
        self.wxr_moved: dict[int, int] = {}  # WXR id -> post id, where they differ
        self.pending_parents: dict[int, int] = {}  # post id -> the WXR id of a parent not seen yet
        self.tally = ImportTally()

    def state(self) -> dict[str, object]:
        """What the merge carries beyond the revision it stored, for a later step to continue it."""
        return {
            "wxr_seen": self.wxr_seen.to_text(),
            "wxr_moved": [[wxr, post] for wxr, post in self.wxr_moved.items()],
            "pending_parents": [[post, wxr] for post, wxr in self.pending_parents.items()],
            "term_parents": [[tax, slug, parent] for (tax, slug), parent in self.term_parents.items()],
            "tally": self.tally.as_dict(),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue a merge whose `state()` was saved with the revision it had stored (this merger's base)."""
        self.wxr_seen = SortedInts.from_text(str(state["wxr_seen"]))
        self.wxr_moved = {int(wxr): int(post) for wxr, post in state["wxr_moved"]}
        self.pending_parents = {int(post): int(wxr) for post, wxr in state["pending_parents"]}
        self.term_parents = {(str(tax), str(slug)): str(parent) for tax, slug, parent in state["term_parents"]}
        self.tally = ImportTally(**state["tally"])

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

    def _page(self, number: int) -> Page:
        """A page to read: changed in this step, cached, read from its blob, or (none yet) empty."""
        if number in self.dirty:
            return self.dirty[number]
        if number in self.clean:
            self.clean.move_to_end(number)
            return self.clean[number]
        ref = self.refs.get(number)
        if ref is None:
            return {}
        page = self.site_content.page(ref)
        self.clean[number] = page
        while len(self.clean) > CACHED_PAGES:
            self.clean.popitem(last=False)
        return page

    def _writable(self, number: int) -> Page:
        if number not in self.dirty:
            cached = self.clean.pop(number, None)
            self.dirty[number] = cached if cached is not None else dict(self._page(number))
        return self.dirty[number]

    def _find(self, key: int, guid: str, wxr_id: int) -> tuple[int, bytes, dict[str, Any]] | None:
        """The post an item's identity names, checked on the post itself (two identities may share a hash)."""
        for post_id in self.index.candidates(key):
            data = self._page(post_id // content.PAGE_IDS).get(post_id)
            if data is None:
                continue
            post = json.loads(data)
            if post["guid"] == guid and int(post["source_id"]) == wxr_id:
                return post_id, data, post
        return None

    def _post_of_wxr(self, wxr_id: int) -> int | None:
        """The post an item of this import with that WXR id became (None: none seen yet)."""
        if wxr_id in self.wxr_moved:
            return self.wxr_moved[wxr_id]
        return wxr_id if wxr_id in self.wxr_seen else None

    def _post_id(self, item: WxrItem, found: tuple[int, bytes, dict[str, Any]] | None) -> int:
        """The item's post: the one it already is, else its WXR id if free, else the next id; remembered by WXR id."""
        if found is not None:
            post_id = found[0]
        elif item.wxr_id > 0 and item.wxr_id not in self._page(item.wxr_id // content.PAGE_IDS):
            post_id = item.wxr_id
        else:
            post_id = self.max_id + 1
        self.max_id = max(self.max_id, post_id)
        if item.wxr_id:
            self.wxr_seen.add(item.wxr_id)
            if post_id != item.wxr_id:
                self.wxr_moved[item.wxr_id] = post_id
            else:
                self.wxr_moved.pop(item.wxr_id, None)
        return post_id

    def _parent(self, item: WxrItem, post_id: int, parent: int) -> int:
        """WXR ids may point forward: a parent not seen yet is resolved at the end (`result`)."""
        if item.parent_wxr_id:
            resolved = self._post_of_wxr(item.parent_wxr_id)
            if resolved is None:
                self.pending_parents[post_id] = item.parent_wxr_id
            else:
                self.pending_parents.pop(post_id, None)
                return resolved
        return parent

    def _item(self, item: WxrItem) -> None:
        self.tally.items += 1
        self.tally.comments += item.comment_count
        key = key_hash(item.guid, item.wxr_id)
        found = self._find(key, item.guid, item.wxr_id)
        post_id = self._post_id(item, found)
        if found is None:
            self.index.add(key, post_id)
        parent = self._parent(item, post_id, int(found[2]["parent"]) if found is not None else 0)
        body = PostBody(content=item.content, excerpt=item.excerpt, meta=item.meta)
        digest = body.digest
        if found is None or found[2]["body"] != digest:
            digest = self.write_body(body)
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
            parent=parent,
            menu_order=item.menu_order,
            comment_count=item.comment_count,
            sticky=item.sticky,
            protected=item.protected,
            summary=summarise(body),
            body=digest,
            source_id=item.wxr_id,
        )
        data = ref.canonical_bytes()
        if found is None:
            self.tally.bump(self.tally.created, item.type)
        elif found[1] == data:
            self.tally.bump(self.tally.unchanged, item.type)
            return  # its page is left as it is
        else:
            self.tally.bump(self.tally.updated, item.type)
        self._writable(post_id // content.PAGE_IDS)[post_id] = data

    def _frame(self) -> Manifest:
        terms = []
        for term_key, term in self.terms.items():
            parent_slug = self.term_parents.get(term_key)
            if parent_slug and (term_key[0], parent_slug) in self.terms:
                term = term.model_copy(update={"parent": self.terms[(term_key[0], parent_slug)].id})
            terms.append(term)
        return self.head.model_copy(
            update={"authors": tuple(self.authors.values()), "terms": tuple(terms), "posts": (), "pages": ()}
        )

    def _post_count(self) -> int:
        return sum(ref.count for n, ref in self.refs.items() if n not in self.dirty) + sum(
            len(page) for page in self.dirty.values()
        )

    def store(self) -> Stored:
        """What the merge has so far as a revision: in one document while the site is small, else the pages changed
        since the last store, the key index if it changed, and the frame naming every page."""
        frame = self._frame()
        if self._post_count() <= content.FLAT_MAX_POSTS:
            numbers = sorted(set(self.refs) | set(self.dirty))
            posts = tuple(
                PostRef.model_validate_json(data) for n in numbers for _, data in sorted(self._page(n).items())
            )
            manifest = frame.model_copy(update={"posts": posts, "index": None}).normalised()
            return Stored(self.site_content.put_frame(manifest), manifest)
        for number in sorted(self.dirty):
            self.refs[number] = self.site_content.put_page(number, self.dirty[number])
        for number, page in self.dirty.items():
            self.clean[number] = page
        self.dirty = {}
        while len(self.clean) > CACHED_PAGES:
            self.clean.popitem(last=False)
        if self.index.changed or self.index_digest is None:
            self.index = self.index.merged()
            self.index_digest = self.site_content.put_key_index(self.index)
        self.wxr_seen.fold()
        manifest = frame.model_copy(
            update={"pages": tuple(self.refs[n] for n in sorted(self.refs)), "index": self.index_digest}
        ).normalised()
        return Stored(self.site_content.put_frame(manifest), manifest)

    def result(self) -> Stored:
        """The parents still pending resolved (to 0 when the file never held them), then `store()`."""
        for post_id, parent_wxr in sorted(self.pending_parents.items()):
            parent = self._post_of_wxr(parent_wxr) or 0
            page = self._page(post_id // content.PAGE_IDS)
            post = json.loads(page[post_id])
            if int(post["parent"]) != parent:
                post["parent"] = parent
                self._writable(post_id // content.PAGE_IDS)[post_id] = PostRef.model_validate(post).canonical_bytes()
        self.pending_parents.clear()
        return self.store()
