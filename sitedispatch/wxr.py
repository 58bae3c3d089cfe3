"""WXR 1.0 to 1.2 (WordPress eXtended RSS) as a stream of authors, terms and items.

Parsed with defusedxml's parser: no DTDs, no entity expansion, no external references (billion laughs and XXE are
refused), and each <item> is dropped from the tree once read, so memory does not grow with the file.

Each author, term and item comes with the byte offset where it starts, so a reading can stop anywhere and resume
there later from the file's header (the bytes before its first author, term or item: the namespaces, the channel,
the WXR version) and the rest of the file from that offset: a long import proceeds in bounded steps.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any
from xml.etree.ElementTree import Element, ParseError, TreeBuilder

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

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


READ_BYTES = 64 * 1024  # fed to the parser at a time
RESUMABLE = frozenset({"item", "author", "category", "tag", "term"})  # what a reading can stop before


@dataclass(frozen=True)
class WxrPosition:
    """Where a reading of a file can resume: before the top-level element starting at byte `offset`, with the
    file's first `header_end` bytes (everything before its first author, term or item) read again first."""

    header_end: int
    offset: int


def parse_wxr(stream: IO[bytes] | HashingReader) -> Iterator[WxrEvent]:
    """Yield authors, terms and items in file order. A malformed or unsafe file raises PermanentError naming the
    line and the problem."""
    for _, event in read_wxr(stream):
        yield event


def read_wxr(
    stream: IO[bytes] | HashingReader, resume: tuple[bytes, WxrPosition] | None = None
) -> Iterator[tuple[WxrPosition, WxrEvent]]:
    """Each author, term and item with the position to resume at to read it (and what follows) again. To resume,
    `stream` is the file from `resume[1].offset` on and `resume[0]` its header (`header_end` bytes)."""
    try:
        yield from _read(stream, resume)
    except ParseError as exc:
        line, column = getattr(exc, "position", (0, 0))
        raise PermanentError(
            f"malformed WXR at line {line}, column {column}: {exc.msg}", code="wxr_malformed"
        ) from None
    except DefusedXmlException as exc:
        raise PermanentError(f"unsafe XML refused: {exc}", code="wxr_unsafe") from None


class _OffsetBuilder(TreeBuilder):
    """Builds the tree as iterparse does and records each channel child's start offset (expat's byte index of the
    start tag, read while expat is at it)."""

    def __init__(self) -> None:
        super().__init__()
        self.parser: Any = None
        self.events: deque[tuple[str, Element, int]] = deque()
        self.depth = 0

    def start(self, tag: str, attrs: dict[str, str]) -> Element:
        element = super().start(tag, attrs)
        self.depth += 1
        self.events.append(("start", element, self.parser.parser.CurrentByteIndex if self.depth == 3 else -1))
        return element

    def end(self, tag: str) -> Element:
        element = super().end(tag)
        self.depth -= 1
        self.events.append(("end", element, -1))
        return element


def _elements(stream: IO[bytes] | HashingReader, prefix: bytes) -> Iterator[tuple[str, Element, int]]:
    """(event, element, start offset within prefix + stream for a channel child, else -1), as the bytes come."""
    builder = _OffsetBuilder()
    parser = DefusedXMLParser(target=builder, forbid_dtd=True)
    builder.parser = parser
    if prefix:
        parser.feed(prefix)
        yield from _drain(builder.events)
    while data := stream.read(READ_BYTES):
        parser.feed(data)
        yield from _drain(builder.events)
    parser.close()
    yield from _drain(builder.events)


def _drain(events: deque[tuple[str, Element, int]]) -> Iterator[tuple[str, Element, int]]:
    while events:
        yield events.popleft()


class _Reading:
    """One pass over a file (or over its header and the rest from a position): what the channel holds, where each
    author, term or item started, and where the header ends."""

    def __init__(self, resume: tuple[bytes, WxrPosition] | None) -> None:
        self.header, at = resume if resume is not None else (b"", WxrPosition(-1, 0))
        self.shift = at.offset - len(self.header)  # a resumed parse's offsets past the header, as the file's
        self.header_end = at.header_end
        self.channel: Element | None = None
        self.version_seen = False
        self.starts: dict[int, int] = {}  # id of a channel child being read -> its start offset in the file

    def started(self, prefix: str, name: str, element: Element, offset: int) -> None:
        if name == "channel" and not prefix:
            self.channel = element
        elif offset >= 0 and name in RESUMABLE:
            absolute = offset if offset < len(self.header) else offset + self.shift
            self.starts[id(element)] = absolute
            if self.header_end < 0:
                self.header_end = absolute

    def ended(self, prefix: str, name: str, element: Element) -> tuple[WxrPosition, WxrEvent] | None:
        if prefix == "wp" and name == "wxr_version":
            _check_version(element)
            self.version_seen = True
            return None
        if self.channel is None or element not in self.channel:
            return None
        produced = _top_level(prefix, name, element)
        start = self.starts.pop(id(element), -1)
        if name in RESUMABLE:
            self.channel.remove(element)  # drop what was read: memory stays flat
        return None if produced is None else (WxrPosition(self.header_end, start), produced)


def _read(
    stream: IO[bytes] | HashingReader, resume: tuple[bytes, WxrPosition] | None
) -> Iterator[tuple[WxrPosition, WxrEvent]]:
    reading = _Reading(resume)
    for event, element, offset in _elements(stream, reading.header):
        prefix, name = _local(element.tag)
        if event == "start":
            reading.started(prefix, name, element, offset)
        elif (produced := reading.ended(prefix, name, element)) is not None:
            yield produced
    if reading.channel is None:
        raise PermanentError("not a WXR file: no <rss><channel>", code="wxr_malformed")
    if not reading.version_seen:
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
