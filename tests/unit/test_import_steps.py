"""An import in bounded steps: a checkpoint after every step (fenced), one commit at the end with the same revision
a step-less import makes, and after a crash the next attempt continues from the last checkpoint, never from the
first item, creating nothing twice."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import PermanentError
from sitedispatch.domain.model import Status
from sitedispatch.drivers.reference import content
from sitedispatch.drivers.reference.merge import ManifestMerger
from sitedispatch.drivers.reference.store import ContentStore
from sitedispatch.local.synthetic import write_wxr
from sitedispatch.operations.progress import Progress
from sitedispatch.wxr import WxrItem, parse_wxr
from tests.factories import present
from tests.unit.conftest import THEME_TEST_DATA, Harness

POSTS = 240


class SimulatedKill(BaseException):
    """The process dies here (SIGKILL): nothing after it runs, no exception handler of the core sees it."""


@pytest.fixture(autouse=True, params=["one document", "pages"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the site's revisions in one document, and in pages of 16 ids past 20 posts (each step then
    reads and writes pages, the key index and a frame)."""
    if request.param == "pages":
        monkeypatch.setattr(content, "PAGE_IDS", 16)
        monkeypatch.setattr(content, "FLAT_MAX_POSTS", 20)
    return str(request.param)


@pytest.fixture(scope="module")
def wxr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("steps") / "site.xml"
    write_wxr(path, posts=POSTS, seed=5)
    return path


def imported(harness: Harness, path: Path) -> tuple[str, dict[str, Any]]:
    """Provision, import `path` (one delivery), and return the head revision and the commit's summary."""
    harness.provisioned()
    result = harness.import_file(path)
    assert result.outcome == Outcome.SUCCEEDED, result
    site = present(harness.world.sites.get("acme-blog"))
    commit = present(result.commit)
    return present(site.head_revision), commit.summary


def events_in(path: Path) -> int:
    """Authors, terms and items: what a step counts and can stop before."""
    with path.open("rb") as stream:
        return sum(1 for _ in parse_wxr(stream))


def checkpoints_of(harness: Harness) -> list[dict[str, Any]]:
    saved: list[dict[str, Any]] = []
    real = harness.world.operations.save_checkpoint

    def recording(
        operation_id: str, fence: int, checkpoint: dict[str, Any], now: float, continues: bool = False
    ) -> None:
        real(operation_id, fence, checkpoint, now, continues)
        saved.append(checkpoint)

    harness.world.operations.save_checkpoint = recording  # type: ignore[method-assign]
    return saved


@pytest.mark.parametrize("path", ["synthetic", "theme"])
def test_an_import_in_steps_commits_once_with_the_revision_a_single_step_makes(
    path: str, wxr: Path, layout: str
) -> None:
    source = wxr if path == "synthetic" else THEME_TEST_DATA
    whole, whole_summary = imported(Harness(), source)
    stepped = Harness(import_step_items=50)
    saved = checkpoints_of(stepped)

    revision, summary = imported(stepped, source)

    assert revision == whole  # the same content, so the same revision
    paged = ContentStore(stepped.world.blobs, "acme-blog").stored_manifest(revision).paged
    assert paged == (layout == "pages")
    assert len(stepped.world.commits.history("acme-blog")) == 2  # the provision's and the import's: one commit
    assert len(saved) == (events_in(source) - 1) // 50 and summary["steps"] == len(saved) + 1
    assert [c["steps"] for c in saved] == list(range(1, len(saved) + 1))
    offsets = [c["offset"] for c in saved]
    assert offsets == sorted(offsets) and offsets[-1] < source.stat().st_size  # forward through the file
    assert all(c["bytes_total"] == source.stat().st_size for c in saved)
    assert {k: summary[k] for k in ("created", "updated", "unchanged", "items")} == {
        k: whole_summary[k] for k in ("created", "updated", "unchanged", "items")
    }


def test_a_killed_import_resumes_from_its_last_checkpoint_and_creates_nothing_twice(
    wxr: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, _ = imported(Harness(), wxr)
    harness = Harness(import_step_items=40)
    harness.provisioned()
    saved = checkpoints_of(harness)
    real_add = ManifestMerger.add
    added = {"n": 0, "kill_at": 130}

    def add(self: ManifestMerger, event: Any) -> None:
        added["n"] += 1
        if added["n"] == added["kill_at"]:
            raise SimulatedKill
        real_add(self, event)

    monkeypatch.setattr(ManifestMerger, "add", add)
    op_id = harness.submit(kind="import", params=harness.submitter.stage_upload("acme-blog", wxr, "tenant-a"))

    with pytest.raises(SimulatedKill):  # killed in its fourth step
        harness.deliver(op_id)
    last = saved[-1]
    assert last["steps"] == 3 and last["items"] < 130
    harness.world.clock.advance(harness.settings.lease_seconds + 1)  # its lease lapses; SQS delivers it again
    added["n"], added["kill_at"] = 0, -1
    result, _ = harness.deliver(op_id)

    assert result.outcome == Outcome.SUCCEEDED
    op = present(harness.world.operations.get(op_id))
    assert op.status == Status.SUCCEEDED and op.attempt == 2
    assert added["n"] == events_in(wxr) - last["steps"] * 40  # the second attempt merged only what came after
    assert present(harness.world.sites.get("acme-blog")).head_revision == whole  # nothing twice, nothing lost
    assert present(result.commit).summary["steps"] > last["steps"]


def test_an_import_out_of_time_continues_in_the_next_invocation_without_spending_an_attempt(
    wxr: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each item takes 0.1 s on the fake clock and a step is 40 items (4 s); an invocation may run 20 s and starts a
    step only with 1.5 step times (15 s) left: two steps per invocation, then it hands over. Every invocation after
    the first continues the same attempt under the next fence, and no item is merged twice."""
    whole, _ = imported(Harness(), wxr)
    harness = Harness(import_step_items=40, import_step_s=10)
    harness.provisioned()
    real_add = ManifestMerger.add
    merged = {"n": 0}

    def add(self: ManifestMerger, event: Any) -> None:
        merged["n"] += 1
        harness.world.clock.advance(0.1)
        real_add(self, event)

    monkeypatch.setattr(ManifestMerger, "add", add)
    op_id = harness.submit(kind="import", params=harness.submitter.stage_upload("acme-blog", wxr, "tenant-a"))
    fence_before = present(harness.world.sites.get("acme-blog")).fence
    outcomes, fences = [], []
    for _ in range(20):
        result, visibility = harness.deliver(op_id, timeout_s=20)
        outcomes.append(result.outcome)
        op = present(harness.world.operations.get(op_id))
        fences.append(op.fence)
        if result.outcome != Outcome.CONTINUING:
            break
        assert visibility.changes[-1] == 0  # the message is back at once for the next invocation
        assert op.continuing and op.checkpoint is not None

    steps = -(-events_in(wxr) // 40)
    invocations = -(-steps // 2)
    assert outcomes == [Outcome.CONTINUING] * (invocations - 1) + [Outcome.SUCCEEDED]
    op = present(harness.world.operations.get(op_id))
    assert op.status == Status.SUCCEEDED and op.attempt == 1  # continuing spent no attempt
    assert fences == [fence_before + n for n in range(1, invocations + 1)]  # each invocation under the next fence
    assert merged["n"] == events_in(wxr)  # each item merged once
    assert present(harness.world.sites.get("acme-blog")).head_revision == whole
    assert len([c for c in harness.world.db.commits.values() if c.operation_id == op_id]) == 1
    assert present(result.commit).summary["steps"] == steps


def test_a_function_timeout_shorter_than_a_step_shortens_the_steps_so_every_invocation_returns_in_time(
    wxr: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locally a function has 30 s; a step may run 60 s (`import_step_s`) and no item limit stops it: each step
    then lasts 12 s at most (30 s over 2.5), and every invocation ends before its timeout."""
    whole, _ = imported(Harness(), wxr)
    harness = Harness(import_step_items=1_000_000, import_step_s=60)
    harness.provisioned()
    real_add = ManifestMerger.add

    def add(self: ManifestMerger, event: Any) -> None:
        harness.world.clock.advance(0.5)
        real_add(self, event)

    monkeypatch.setattr(ManifestMerger, "add", add)
    op_id = harness.submit(kind="import", params=harness.submitter.stage_upload("acme-blog", wxr, "tenant-a"))
    took = []
    for _ in range(100):
        began = harness.world.clock.now()
        result, _ = harness.deliver(op_id, timeout_s=30)
        took.append(harness.world.clock.now() - began)
        if result.outcome != Outcome.CONTINUING:
            break
    assert result.outcome == Outcome.SUCCEEDED and len(took) > 2
    # one step of 12 s and its last item, then it hands over (a second would need 1.5 x 60 s left)
    assert max(took) <= 12 + 0.5 < 30
    assert present(harness.world.sites.get("acme-blog")).head_revision == whole


def test_a_dead_imports_evidence_names_its_last_checkpoint(wxr: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(import_step_items=40)
    harness.provisioned()
    real_add = ManifestMerger.add
    added = {"n": 0}

    def add(self: ManifestMerger, event: Any) -> None:
        added["n"] += 1
        if added["n"] == 100:
            raise PermanentError("item 100 cannot be stored", code="bad_item")
        real_add(self, event)

    monkeypatch.setattr(ManifestMerger, "add", add)
    result = harness.import_file(wxr)

    assert (result.outcome, result.reason) == (Outcome.DEAD, "bad_item")
    [dead] = [op for op in harness.world.db.operations.values() if op.status == Status.DEAD]
    evidence = json.loads(harness.world.blobs.get(present(dead.evidence)["key"]))
    assert evidence["checkpoint"]["steps"] == 2 and evidence["checkpoint"]["offset"] > 0  # before events 41 and 81
    assert present(dead.evidence)["checkpoint"] == evidence["checkpoint"]


def test_progress_moves_forward_and_the_eta_is_within_twice_the_remaining_time(
    wxr: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each item takes a seeded random time on the fake clock (8-12 ms; an author or a term, which has no body to
    store, 0.5 ms); at every checkpoint the ETA from the rate so far is compared with the time the import actually
    took from there (measured on the fake clock, not asserted on the wall clock)."""
    harness = Harness(import_step_items=30)
    harness.provisioned()
    saved = checkpoints_of(harness)
    rng = random.Random(3)
    real_add = ManifestMerger.add

    def add(self: ManifestMerger, event: Any) -> None:
        harness.world.clock.advance(rng.uniform(0.008, 0.012) if isinstance(event, WxrItem) else 0.0005)
        real_add(self, event)

    monkeypatch.setattr(ManifestMerger, "add", add)
    result = harness.import_file(wxr)
    assert result.outcome == Outcome.SUCCEEDED
    finished = present(result.commit).committed_at

    progress = [present(Progress.of(c)) for c in saved]
    assert len(progress) >= 5
    assert [p.bytes_done for p in progress] == sorted({p.bytes_done for p in progress})  # strictly forward
    assert [p.items for p in progress] == sorted(p.items for p in progress)
    for checkpoint, p in zip(saved, progress, strict=True):
        actual = finished - checkpoint["at"]
        assert p.eta_s is not None and actual / 2 <= p.eta_s <= actual * 2, (p, actual)


@pytest.mark.parametrize("stale", ["another file", "another head"])
def test_a_checkpoint_of_another_file_or_onto_another_head_is_not_resumed(stale: str, tmp_path: Path) -> None:
    """A redrive with a corrected file starts over, and so does one after another operation committed: a checkpoint
    names the file and the head it belongs to (resuming onto a newer head would drop that commit's changes)."""
    source = tmp_path / "other.xml"
    write_wxr(source, posts=30, seed=6)
    whole, _ = imported(Harness(), source)
    harness = Harness(import_step_items=20)
    harness.provisioned()
    params = harness.submitter.stage_upload("acme-blog", source, "tenant-a")
    op_id = harness.submit(kind="import", params=params)
    head = present(harness.world.sites.get("acme-blog")).head_revision
    checkpoint = {
        "kind": "import",
        "source_digest": "0" * 64 if stale == "another file" else params["source_digest"],
        "base": head if stale == "another file" else "f" * 64,
        "header_end": 1,
        "offset": 99999,
        "revision": "x" * 64,
        "state_key": "checkpoints/none.json",
        "items": 1,
        "steps": 1,
        "bytes_total": 1,
    }
    harness.world.db.operations[op_id] = replace(present(harness.world.operations.get(op_id)), checkpoint=checkpoint)
    result, _ = harness.deliver(op_id)
    assert result.outcome == Outcome.SUCCEEDED, result
    assert present(harness.world.sites.get("acme-blog")).head_revision == whole  # from the first item
