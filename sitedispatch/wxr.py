"""WXR 1.0 to 1.2 (WordPress eXtended RSS) as a stream of authors, terms and items.

Parsed with defusedxml's iterparse: no DTDs, no entity expansion, no external references (billion laughs and XXE are
refused), and each <item> is dropped from the tree once read, so memory does not grow with the file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from sitedispatch.domain.errors import PermanentError

SUPPORTED_VERSIONS = {"1.0", "1.1", "1.2"}
CONTENT_NS = "http://purl.org/rss/1.0/modules/content/"
DC_NS = "http://purl.org/dc/elements/1.1/"
ZERO_DATE = "0000-00-00 00:00:00"


@dataclass(frozen=True)
class WxrAuthor:
    login: str
    email: str
    display_name: str


@dataclass(frozen=True)
class WxrTerm:
    taxonomy: str
    slug: str
    name: str
    parent_slug: str = ""
    description: str = ""


@dataclass(frozen=True)
class WxrComment:
    wxr_id: int
    author: str
    author_email: str
    author_url: str
    date_gmt: str
    content: str
    approved: str  # "1", "0", "spam", "trash"
    type: str
    parent_wxr_id: int


@dataclass(frozen=True)
class WxrItem:
    guid: str
    wxr_id: int
    title: str
    slug: str
    type: str
    status: str
    date_gmt: str
    author_login: str
    content: str
    excerpt: str
    parent_wxr_id: int
    menu_order: int
    sticky: bool
    protected: bool
    terms: tuple[tuple[str, str, str], ...]  # (taxonomy, slug, name)
    comment_count: int
    meta: dict[str, str] = field(default_factory=dict)
    comments: tuple[WxrComment, ...] = ()
    comment_status: str = ""  # "open" | "closed" ("" when the file does not say)


WxrEvent = WxrAuthor | WxrTerm | WxrItem


def _local(tag: str) -> tuple[str, str]:
    """('wp' | 'excerpt' | 'content' | 'dc' | '', local name) for a namespaced tag."""
    if not tag.startswith("{"):
        return "", tag
    uri, local = tag[1:].split("}", 1)
    if "wordpress.org/export/" in uri:
        return ("excerpt" if uri.rstrip("/").endswith("excerpt") else "wp"), local
    if uri == CONTENT_NS:
        return "content", local
    if uri == DC_NS:
        return "dc", local
    return uri, local


def _children(element: Element) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for child in element:
        key = _local(child.tag)
        out.setdefault(key, (child.text or "").strip() if key[1] not in {"encoded"} else (child.text or ""))
    return out


def _int(value: str, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class HashingReader:
    """Wraps a binary stream, hashing (sha256) and counting what is read through it."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.sha256.update(data)
        self.size += len(data)
        return data


def parse_wxr(stream: IO[bytes] | HashingReader) -> Iterator[WxrEvent]:
    """Yield authors, terms and items in file order. A malformed or unsafe file raises PermanentError naming the
    line and the problem."""
    try:
        yield from _read(stream)
    except ParseError as exc:
        line, column = getattr(exc, "position", (0, 0))
        raise PermanentError(
            f"malformed WXR at line {line}, column {column}: {exc.msg}", code="wxr_malformed"
        ) from None
    except DefusedXmlException as exc:
        raise PermanentError(f"unsafe XML refused: {exc}", code="wxr_unsafe") from None


def _read(stream: IO[bytes] | HashingReader) -> Iterator[WxrEvent]:
    channel: Element | None = None
    version_seen = False
    for event, element in iterparse(stream, events=("start", "end"), forbid_dtd=True):
        prefix, name = _local(element.tag)
        if event == "start":
            if name == "channel" and not prefix:
                channel = element
        elif prefix == "wp" and name == "wxr_version":
            _check_version(element)
            version_seen = True
        elif channel is not None and element in channel:
            produced = _top_level(prefix, name, element)
            if produced is not None:
                yield produced
            if name in {"item", "author", "category", "tag", "term"}:
                channel.remove(element)  # drop what was read: memory stays flat
    if channel is None:
        raise PermanentError("not a WXR file: no <rss><channel>", code="wxr_malformed")
    if not version_seen:
        raise PermanentError("not a WXR file: no <wp:wxr_version>", code="wxr_malformed")


def _check_version(element: Element) -> None:
    version = (element.text or "").strip()
    if version not in SUPPORTED_VERSIONS:
        raise PermanentError(f"WXR version {version!r} is not supported (1.0, 1.1, 1.2)", code="wxr_version")


def _top_level(prefix: str, name: str, element: Element) -> WxrEvent | None:
    if prefix == "wp" and name == "author":
        c = _children(element)
        login = c.get(("wp", "author_login"), "")
        return WxrAuthor(login, c.get(("wp", "author_email"), ""), c.get(("wp", "author_display_name"), login))
    if prefix == "wp" and name == "category":
        c = _children(element)
        return WxrTerm(
            "category",
            c.get(("wp", "category_nicename"), ""),
            c.get(("wp", "cat_name"), ""),
            c.get(("wp", "category_parent"), ""),
            c.get(("wp", "category_description"), ""),
        )
    if prefix == "wp" and name == "tag":
        c = _children(element)
        return WxrTerm(
            "post_tag",
            c.get(("wp", "tag_slug"), ""),
            c.get(("wp", "tag_name"), ""),
            "",
            c.get(("wp", "tag_description"), ""),
        )
    if prefix == "wp" and name == "term":
        c = _children(element)
        return WxrTerm(
            c.get(("wp", "term_taxonomy"), ""),
            c.get(("wp", "term_slug"), ""),
            c.get(("wp", "term_name"), ""),
            c.get(("wp", "term_parent"), ""),
            c.get(("wp", "term_description"), ""),
        )
    if not prefix and name == "item":
        return _item(element)
    return None


def _item(element: Element) -> WxrItem:
    c = _children(element)
    terms: list[tuple[str, str, str]] = []
    comments: list[WxrComment] = []
    meta: dict[str, str] = {}
    for child in element:
        prefix, name = _local(child.tag)
        if not prefix and name == "category" and child.get("domain"):
            terms.append((child.get("domain", ""), child.get("nicename", ""), (child.text or "").strip()))
        elif prefix == "wp" and name == "comment":
            comments.append(_comment(_children(child)))
        elif prefix == "wp" and name == "postmeta":
            m = _children(child)
            key = m.get(("wp", "meta_key"), "")
            if key and not key.startswith("_"):
                meta[key] = m.get(("wp", "meta_value"), "")
    if c.get(("wp", "attachment_url")):
        meta["attachment_url"] = c[("wp", "attachment_url")]
    date = c.get(("wp", "post_date_gmt"), "") or ZERO_DATE
    if date == ZERO_DATE:
        date = c.get(("wp", "post_date"), "") or ZERO_DATE
    wxr_id = _int(c.get(("wp", "post_id"), ""))
    return WxrItem(
        guid=c.get(("", "guid"), "") or f"wxr-post-{wxr_id}",
        wxr_id=wxr_id,
        title=c.get(("", "title"), ""),
        slug=c.get(("wp", "post_name"), "") or f"post-{wxr_id}",
        type=c.get(("wp", "post_type"), "") or "post",
        status=c.get(("wp", "status"), "") or "draft",
        date_gmt="1970-01-01 00:00:00" if date == ZERO_DATE else date,
        author_login=c.get(("dc", "creator"), ""),
        content=c.get(("content", "encoded"), ""),
        excerpt=c.get(("excerpt", "encoded"), ""),
        parent_wxr_id=_int(c.get(("wp", "post_parent"), "")),
        menu_order=_int(c.get(("wp", "menu_order"), "")),
        sticky=c.get(("wp", "is_sticky"), "0") == "1",
        protected=bool(c.get(("wp", "post_password"), "")),
        terms=tuple(terms),
        comment_count=sum(comment.approved == "1" for comment in comments),
        meta=meta,
        comments=tuple(comments),
        comment_status=c.get(("wp", "comment_status"), ""),
    )


def _comment(c: dict[tuple[str, str], str]) -> WxrComment:
    date = c.get(("wp", "comment_date_gmt"), "") or c.get(("wp", "comment_date"), "") or ZERO_DATE
    return WxrComment(
        wxr_id=_int(c.get(("wp", "comment_id"), "")),
        author=c.get(("wp", "comment_author"), ""),
        author_email=c.get(("wp", "comment_author_email"), ""),
        author_url=c.get(("wp", "comment_author_url"), ""),
        date_gmt="1970-01-01 00:00:00" if date == ZERO_DATE else date,
        content=c.get(("wp", "comment_content"), ""),
        approved=c.get(("wp", "comment_approved"), "1") or "1",
        type=c.get(("wp", "comment_type"), "") or "comment",
        parent_wxr_id=_int(c.get(("wp", "comment_parent"), "")),
    )
