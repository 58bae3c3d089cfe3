"""A WXR stream into a real WordPress through its REST API, resumable and idempotent.

Every post, page and comment created carries its source key (the WXR guid and post id, as the reference driver keys
items: guids alone repeat, even in WordPress's own test data; plus #comment-ID for a comment) as the
`sitedispatch_source` meta, written by the same request that creates it. A retried import first asks the site what
already exists (one request to the mu-plugin) and creates only the rest, so a crash mid-import never duplicates an
item. Terms are matched by slug, authors by login (an author with no user on the site is attributed to the
dispatcher's user). Attachments are counted as metadata, not downloaded (no traffic beyond the site).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from sitedispatch.drivers.wordpress.origin import WordPressOrigin, WordPressRejected
from sitedispatch.wxr import WxrAuthor, WxrComment, WxrEvent, WxrItem, WxrTerm

SOURCE_META = "sitedispatch_source"
COLLECTIONS = {"post": "posts", "page": "pages"}
TAXONOMIES = {"category": "categories", "post_tag": "tags"}
STATUSES = {"publish", "draft", "future", "pending", "private"}
COMMENT_STATUS = {"1": "approved", "0": "hold", "spam": "spam", "trash": "trash"}
NO_DATE = "1970-01-01 00:00:00"
MAX_PENDING = 32  # items submitted ahead of their creation: memory stays bounded on large files


def item_key(item: WxrItem) -> str:
    return f"{item.guid}#post-{item.wxr_id}"


def comment_key(item: WxrItem, comment: WxrComment) -> str:
    return f"{item_key(item)}#comment-{comment.wxr_id}"


@dataclass
class ImportTally:
    created: Counter[str] = field(default_factory=Counter)
    existing: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    attachments: int = 0
    requests: int = 0

    def restore(self, counts: dict[str, Any]) -> None:
        """Carry over what an earlier step counted (its `as_dict()`, as its checkpoint stored it)."""
        self.created, self.existing = Counter(counts["created"]), Counter(counts["existing"])
        self.skipped, self.attachments = Counter(counts["skipped"]), int(counts["attachments_counted"])
        self.requests = int(counts["requests"])

    def as_dict(self) -> dict[str, Any]:
        """The commit summary's counts, and what a checkpoint carries over to the next step."""
        return {
            "created": dict(self.created),
            "existing": dict(self.existing),
            "skipped": dict(self.skipped),
            "attachments_counted": self.attachments,
            "requests": self.requests,
        }


class RestImporter:
    """Feed it WXR events in file order (`add`), then `finish`. `heartbeat` is called from the caller's thread
    while items are created in `workers` threads."""

    def __init__(
        self, origin: WordPressOrigin, imported: dict[str, int], heartbeat: Callable[[], None], workers: int = 4
    ) -> None:
        self.origin = origin
        self.imported = dict(imported)
        self.heartbeat = heartbeat
        self.tally = ImportTally()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="wp-import")
        self.pending: set[Future[None]] = set()
        self.lock = threading.Lock()
        self.users: dict[str, int] = {}
        self.me = 0
        self.terms: dict[tuple[str, str], int] = {}
        self.wxr_ids: dict[int, int] = {}  # WXR post id -> WordPress id, for page parents
        self.orphans: list[tuple[int, int]] = []  # (WordPress page id, WXR parent id) resolved at the end
        self.items = 0  # posts and pages fed so far (by earlier steps too)
        self.earlier_requests = 0  # what earlier invocations of this import sent (this one's: origin.requests)
        for key, post_id in self.imported.items():  # what WordPress already holds, for the parents of pages
            head, sep, wxr_id = key.rpartition("#post-")
            if sep and head and wxr_id.isdigit():
                self.wxr_ids[int(wxr_id)] = post_id

    def __enter__(self) -> RestImporter:
        me = self.origin.rest("GET", "/wp/v2/users/me", query={"context": "edit"})
        self.me = int(me["id"])
        for user in self.origin.rest_pages("/wp/v2/users", {"context": "edit"}):
            self.users[str(user.get("username", user.get("slug", "")))] = int(user["id"])
        for taxonomy, collection in TAXONOMIES.items():
            for term in self.origin.rest_pages(f"/wp/v2/{collection}", {"hide_empty": "false"}):
                self.terms[(taxonomy, str(term["slug"]))] = int(term["id"])
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.pool.shutdown(wait=True, cancel_futures=exc is not None)
        self.tally.requests = self.earlier_requests + self.origin.requests

    # -- events ------------------------------------------------------------------------------------------------------

    def add(self, event: WxrEvent) -> None:
        if isinstance(event, WxrAuthor):
            if event.login not in self.users:
                self.tally.skipped["authors_without_user"] += 1
        elif isinstance(event, WxrTerm):
            self._term(event.taxonomy, event.slug, event.name, event.description, event.parent_slug, declared=True)
        elif event.type == "attachment":
            self.tally.attachments += 1
        elif event.type not in COLLECTIONS:
            self.tally.skipped[event.type] += 1
        elif event.status not in STATUSES:
            self.tally.skipped[f"{event.type}_{event.status}"] += 1
        else:
            body = self._post_body(event)  # terms are ensured here, in file order, before the item is queued
            self._throttle()
            self.items += 1
            self.pending.add(self.pool.submit(self._item, event, body))

    def settle(self) -> None:
        """Every item fed so far created (or found): what a checkpoint may then say is done."""
        while self.pending:
            self._wait_some()

    def state(self) -> dict[str, Any]:
        """What the next step needs besides what WordPress holds: the counts and the pages awaiting a parent."""
        self.tally.requests = self.earlier_requests + self.origin.requests
        return {"tally": self.tally.as_dict(), "orphans": self.orphans, "items": self.items}

    def restore(self, state: dict[str, Any]) -> None:
        self.tally.restore(state["tally"])
        self.earlier_requests = self.tally.requests
        self.orphans = [(int(page), int(parent)) for page, parent in state["orphans"]]
        self.items = int(state["items"])

    def finish(self) -> ImportTally:
        self.settle()
        for page_id, parent_wxr_id in self.orphans:
            parent = self.wxr_ids.get(parent_wxr_id)
            if parent:
                self.origin.rest("POST", f"/wp/v2/pages/{page_id}", {"parent": parent})
        return self.tally

    def _throttle(self) -> None:
        while len(self.pending) >= MAX_PENDING:
            self._wait_some()

    def _wait_some(self) -> None:
        done, self.pending = wait(self.pending, timeout=1.0, return_when=FIRST_COMPLETED)
        self.heartbeat()
        for future in done:
            future.result()  # re-raises the first failure (a stale fence, a rejected item, WordPress down)

    # -- terms -------------------------------------------------------------------------------------------------------

    def _term(
        self, taxonomy: str, slug: str, name: str, description: str = "", parent_slug: str = "", declared: bool = False
    ) -> int | None:
        """The term's id, created if the site lacks it. `declared`: a term of the file's header (counted when it
        already exists); an item's reference to a term is not counted again."""
        collection = TAXONOMIES.get(taxonomy)
        if collection is None:
            if declared:
                self.tally.skipped[f"term_{taxonomy}"] += 1
            return None
        known = self.terms.get((taxonomy, slug))
        if known is not None:
            if declared:
                self.tally.existing[taxonomy] += 1
            return known
        body: dict[str, Any] = {"name": name or slug, "slug": slug, "description": description}
        if parent_slug and taxonomy == "category":
            parent = self.terms.get((taxonomy, parent_slug))
            if parent is not None:
                body["parent"] = parent
        try:
            created = self.origin.rest("POST", f"/wp/v2/{collection}", body)
            term_id = int(created["id"])
            self.tally.created[taxonomy] += 1
        except WordPressRejected as exc:
            existing = (
                (exc.detail.get("data") or {}).get("term_id") if exc.detail.get("code") == "term_exists" else None
            )
            if existing is None:
                raise
            term_id = int(existing)  # same name under another slug: WordPress keeps one term
            self.tally.existing[taxonomy] += 1
        self.terms[(taxonomy, slug)] = term_id
        return term_id

    # -- items -------------------------------------------------------------------------------------------------------

    def _post_body(self, item: WxrItem) -> dict[str, Any]:
        body: dict[str, Any] = {
            "title": item.title,
            "content": item.content,
            "excerpt": item.excerpt,
            "status": item.status,
            "slug": item.slug,
            "author": self.users.get(item.author_login, self.me),
            "meta": {SOURCE_META: item_key(item)},
        }
        if item.date_gmt != NO_DATE:
            body["date_gmt"] = item.date_gmt.replace(" ", "T")
        if item.comment_status in {"open", "closed"}:
            body["comment_status"] = item.comment_status  # the mu-plugin lets the import add its comments anyway
        if item.type == "post":
            body["sticky"] = item.sticky
            categories: list[int] = []
            tags: list[int] = []
            for taxonomy, slug, name in item.terms:
                term_id = self._term(taxonomy, slug, name)
                if term_id is not None:
                    (categories if taxonomy == "category" else tags).append(term_id)
            body["categories"], body["tags"] = sorted(set(categories)), sorted(set(tags))
        else:
            body["menu_order"] = item.menu_order
        return body

    def _item(self, item: WxrItem, body: dict[str, Any]) -> None:
        post_id = self.imported.get(item_key(item))
        if post_id is None:
            parent = self.wxr_ids.get(item.parent_wxr_id) if item.parent_wxr_id else None
            if item.type == "page" and parent:
                body["parent"] = parent
            created = self.origin.rest("POST", f"/wp/v2/{COLLECTIONS[item.type]}", body)
            post_id = int(created["id"])
            with self.lock:
                self.tally.created[item.type] += 1
                if item.type == "page" and item.parent_wxr_id and not parent:
                    self.orphans.append((post_id, item.parent_wxr_id))
        else:
            with self.lock:
                self.tally.existing[item.type] += 1
        with self.lock:
            self.wxr_ids[item.wxr_id] = post_id
        self._comments(item, post_id)

    def _comments(self, item: WxrItem, post_id: int) -> None:
        created: dict[int, int] = {}
        for comment in item.comments:
            key = comment_key(item, comment)
            existing = self.imported.get(key)
            if existing is not None:
                created[comment.wxr_id] = existing
                with self.lock:
                    self.tally.existing["comment"] += 1
                continue
            if comment.type not in {"comment", ""}:
                with self.lock:
                    self.tally.skipped[f"comment_{comment.type}"] += 1
                continue
            body: dict[str, Any] = {
                "post": post_id,
                "author_name": comment.author,
                "author_email": comment.author_email,
                "author_url": comment.author_url,
                "content": comment.content,
                "status": COMMENT_STATUS.get(comment.approved, "hold"),
                "meta": {SOURCE_META: key},
                "parent": created.get(comment.parent_wxr_id, 0),
            }
            if comment.date_gmt != NO_DATE:
                body["date_gmt"] = comment.date_gmt.replace(" ", "T")
            body = {name: value for name, value in body.items() if value != ""}  # REST validates formats
            answer = self.origin.rest("POST", "/wp/v2/comments", body)
            created[comment.wxr_id] = int(answer["id"])
            with self.lock:
                self.tally.created["comment"] += 1
