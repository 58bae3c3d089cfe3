"""A WXR reading stops before any author, term or item and resumes there from the file's header and the rest of the
file: what the resumed reading yields is exactly what the whole reading yields from that point (the foundation of
imports in bounded steps)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from sitedispatch.domain.errors import PermanentError
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.wxr import WxrPosition, read_wxr
from tests.unit.conftest import FIXTURES, THEME_TEST_DATA

START_TAGS = (b"<item", b"<wp:author", b"<wp:category", b"<wp:tag", b"<wp:term")


def whole(data: bytes) -> list[tuple[WxrPosition, object]]:
    return list(read_wxr(io.BytesIO(data)))


def resumed(data: bytes, at: WxrPosition) -> list[tuple[WxrPosition, object]]:
    return list(read_wxr(io.BytesIO(data[at.offset :]), (data[: at.header_end], at)))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("wxr") / "synthetic.xml"
    write_wxr(path, posts=400, seed=11)
    return path.read_bytes()


@pytest.mark.parametrize("name", ["theme", "fixture-1.0.xml", "fixture-1.1.xml", "fixture-1.2.xml", "synthetic"])
def test_resuming_at_any_position_yields_exactly_the_rest(name: str, synthetic: bytes) -> None:
    data = synthetic if name == "synthetic" else (THEME_TEST_DATA if name == "theme" else FIXTURES / name).read_bytes()
    events = whole(data)
    assert events, name
    header_end = events[0][0].header_end
    assert all(position.header_end == header_end for position, _ in events)  # one header per file
    for position, _ in events:  # each position is the start tag of what it comes with
        assert data[position.offset :].startswith(START_TAGS), data[position.offset : position.offset + 20]
    assert [p.offset for p, _ in events] == sorted({p.offset for p, _ in events})  # strictly in file order
    rng = random.Random(7)
    for k in sorted(rng.sample(range(len(events)), min(12, len(events)))):
        assert resumed(data, events[k][0]) == events[k:], f"{name}: resumed before event {k}"


def test_a_resumed_reading_resumes_again(synthetic: bytes) -> None:
    events = whole(synthetic)
    first = resumed(synthetic, events[100][0])
    assert resumed(synthetic, first[150][0]) == events[250:]  # positions from a resumed reading are the file's


def test_a_reading_stops_anywhere_and_the_steps_together_yield_the_whole(synthetic: bytes) -> None:
    """As an import in steps reads: each step stops before its N+1th event and records where; the next step
    resumes there."""
    events = whole(synthetic)
    steps, collected, at = 0, [], None
    while True:
        stream = io.BytesIO(synthetic if at is None else synthetic[at.offset :])
        reading = read_wxr(stream, None if at is None else (synthetic[: at.header_end], at))
        at = None
        for n, (position, event) in enumerate(reading):
            if n == 37:
                at = position
                break
            collected.append((position, event))
        steps += 1
        if at is None:
            break
    assert collected == events and steps == len(events) // 37 + 1


def test_a_malformed_rest_is_refused_as_the_whole_file_would_be(synthetic: bytes) -> None:
    at = whole(synthetic)[10][0]
    broken = synthetic[: len(synthetic) - 40]  # the closing tags cut off
    with pytest.raises(PermanentError) as caught:
        resumed(broken, at)
    assert caught.value.code == "wxr_malformed"


def test_the_header_of_a_file_without_items_is_the_whole_channel(tmp_path: Path) -> None:
    data = (FIXTURES / "fixture-1.2.xml").read_bytes()
    first = whole(data)[0][0]
    assert b"<wp:wxr_version>" in data[: first.header_end]  # the version is read again on every resume
