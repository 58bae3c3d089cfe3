"""Deterministic, seeded WXR 1.2 files of any size, for load tests and benchmarks (written as a stream)."""

from __future__ import annotations

import random
from pathlib import Path
from xml.sax.saxutils import escape

_TEXT = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore "
    "magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo "
    "consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur"
)
WORDS = tuple(_TEXT.split())

HEADER = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:excerpt="http://wordpress.org/export/1.2/excerpt/" \
xmlns:content="http://purl.org/rss/1.0/modules/content/" xmlns:dc="http://purl.org/dc/elements/1.1/" \
xmlns:wp="http://wordpress.org/export/1.2/">
<channel>
<title>Synthetic</title>
<link>https://synthetic.example</link>
<description>generated</description>
<wp:wxr_version>1.2</wp:wxr_version>
<wp:author><wp:author_login>writer</wp:author_login><wp:author_email>w@synthetic.example</wp:author_email>\
<wp:author_display_name><![CDATA[Writer]]></wp:author_display_name></wp:author>
"""


def write_wxr(
    path: Path,
    *,
    posts: int | None = None,
    target_bytes: int | None = None,
    seed: int = 1,
    paragraphs: int = 6,
    categories: int = 20,
    tags: int = 50,
    first_id: int = 1001,
) -> dict[str, int]:
    """Write posts until `posts` are written or the file reaches `target_bytes`, with WXR post ids from `first_id`
    (guids follow them). Returns counts."""
    rng = random.Random(seed)
    written = 0
    size = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write(HEADER)
        for n in range(categories):
            fh.write(
                f"<wp:category><wp:category_nicename>topic-{n}</wp:category_nicename>"
                f"<wp:cat_name><![CDATA[Topic {n}]]></wp:cat_name></wp:category>\n"
            )
        while (posts is None or written < posts) and (target_bytes is None or size < target_bytes):
            written += 1
            body = "\n".join(
                f"<p>{' '.join(rng.choice(WORDS) for _ in range(rng.randint(40, 90)))}</p>" for _ in range(paragraphs)
            )
            title = " ".join(rng.choice(WORDS) for _ in range(5)).capitalize()
            day = 1 + written % 28
            post_id = first_id + written - 1
            item = (
                f"<item><title>{escape(title)} {written}</title><dc:creator>writer</dc:creator>"
                f'<guid isPermaLink="false">https://synthetic.example/?p={post_id}</guid>'
                f"<content:encoded><![CDATA[{body}]]></content:encoded><excerpt:encoded><![CDATA[]]></excerpt:encoded>"
                f"<wp:post_id>{post_id}</wp:post_id>"
                f"<wp:post_date_gmt>2024-{1 + written % 12:02d}-{day:02d} 10:{written % 60:02d}:00</wp:post_date_gmt>"
                f"<wp:post_name>post-{written}</wp:post_name><wp:status>publish</wp:status>"
                f"<wp:post_type>post</wp:post_type>"
                f'<category domain="category" nicename="topic-{rng.randrange(categories)}">Topic</category>'
                f'<category domain="post_tag" nicename="tag-{rng.randrange(tags)}">Tag</category>'
                f"</item>\n"
            )
            fh.write(item)
            size += len(item)
        fh.write("</channel>\n</rss>\n")
    return {"posts": written, "bytes": path.stat().st_size}
