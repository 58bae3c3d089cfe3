"""The chaos campaign's invariant checker must be able to fail: each invariant, broken on purpose, is reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chaos.invariants import DriverLedger, LiveWatch, Violations, check_after
from sitedispatch.domain.events import terminal_event_id
from sitedispatch.domain.model import PublicationStatus, Status
from sitedispatch.events.worker import EventsDeps, EventsWorker
from sitedispatch.publication.live import object_key
from tests.fakes import MemoryDb
from tests.unit.conftest import FIXTURES, OPERATOR, Harness

SITES = ["acme-blog", "other-site"]


def healthy() -> tuple[Harness, DriverLedger]:
    harness = Harness()
    ledger = DriverLedger(started_at=harness.world.clock.now())
    for site in SITES:
        harness.provisioned(site)
    harness.import_file(FIXTURES / "fixture-1.2.xml")
    harness.drain_publications()
    dead = harness.submit(site=harness.registered("never-provisioned"), kind="publish", params={})
    harness.deliver(dead)
    harness.controls().set_paused(OPERATOR, "acme-blog", True, "x")
    harness.controls().set_paused(OPERATOR, "acme-blog", False, "y")
    ledger.actions.update({"pause": 1, "resume": 1})
    ledger.accepted.update(harness.world.db.operations)
    world = harness.world  # every event delivered, as the events worker does
    EventsWorker(EventsDeps(world.events, world.event_bus)).process(world.db.announced)
    return harness, ledger


def violations_of(harness: Harness, ledger: DriverLedger) -> list[str]:
    found = Violations()
    check_after(harness.world, harness.settings, SITES, ledger, found)
    return found.found


def test_a_healthy_world_has_no_violation() -> None:
    harness, ledger = healthy()
    assert violations_of(harness, ledger) == []


@pytest.mark.parametrize(
    ("breakage", "invariant"),
    [
        ("queued", "every accepted operation ends terminal"),
        ("vanished", "accepted operations are kept"),
        ("version_gap", "versions form a chain"),
        ("fence_back", "fences strictly increase per site"),
        ("cancelled_committed", "only succeeded operations commit"),
        ("no_evidence", "every dead operation has evidence"),
        ("counter", "counters equal the recount"),
        ("open_publication", "every publication finishes"),
        ("unaudited", "every operator action is audited"),
        ("no_event", "every terminal operation has its event"),
        ("undelivered", "every event is delivered"),
        ("wrong_outcome", "an event tells the outcome"),
        ("feed_gap", "a feed's places have no gap"),
        ("placed_twice", "an event takes one feed place"),
    ],
)
def test_each_broken_invariant_is_reported(breakage: str, invariant: str) -> None:
    harness, ledger = healthy()
    db = harness.world.db
    commits = sorted((c for c in db.commits.values() if c.site_id == "acme-blog"), key=lambda c: c.version)
    if breakage == "queued":
        op_id = next(iter(db.operations))
        db.operations[op_id] = replace(db.operations[op_id], status=Status.QUEUED)
    elif breakage == "vanished":
        ledger.accepted.add("op_never_written")
    elif breakage == "version_gap":
        db.commits[commits[-1].operation_id] = replace(commits[-1], version=7)
    elif breakage == "fence_back":
        db.commits[commits[-1].operation_id] = replace(commits[-1], fence=0)
    elif breakage == "cancelled_committed":
        op_id = commits[-1].operation_id
        db.operations[op_id] = replace(db.operations[op_id], status=Status.CANCELLED)
    elif breakage == "no_evidence":
        dead = next(op for op in db.operations.values() if op.status == Status.DEAD)
        db.operations[dead.operation_id] = replace(dead, evidence=None)
    elif breakage == "counter":
        db.bump("site#acme-blog", 1, 0.0)
    elif breakage == "open_publication":
        key = max(k for k in db.publications if k[0] == "acme-blog")
        db.publications[key] = replace(db.publications[key], status=PublicationStatus.PENDING)
    elif breakage == "unaudited":
        ledger.actions["redrive"] += 1
    else:
        break_events(db, breakage)

    found = violations_of(harness, ledger)

    assert any(v.startswith(invariant) for v in found), found


def break_events(db: MemoryDb, breakage: str) -> None:
    """An event lost, left undelivered or telling another outcome; a feed with a gap or an event placed twice."""
    op = next(iter(db.operations.values()))
    event_id = terminal_event_id(op.operation_id, op.epoch)
    feed = db.feed[next(iter(db.feed))]
    if breakage == "no_event":
        del db.events[event_id]
    elif breakage == "undelivered":
        db.events[event_id] = replace(db.events[event_id], seq=None)
    elif breakage == "wrong_outcome":
        told = db.events[event_id]
        db.events[event_id] = replace(told, event=replace(told.event, detail={**told.event.detail, "status": "x"}))
    elif breakage == "feed_gap":
        feed.pop(0)
    elif breakage == "placed_twice":
        feed.append(replace(feed[0], seq=len(feed) + 1))
    else:
        raise AssertionError(f"no breakage {breakage}")


def test_the_live_watch_reports_a_live_pointer_going_back_and_an_unreadable_route() -> None:
    harness, _ = healthy()
    found = Violations()
    sampler = LiveWatch(harness.world, found)
    sampler.sample("acme-blog")
    assert found.found == [] and sampler.routes_read > 0
    site = harness.world.db.sites["acme-blog"]
    harness.world.db.sites["acme-blog"] = replace(site, live_seq=site.live_seq - 1)
    sampler.sample("acme-blog")
    assert any(v.startswith("live seq never decreases") for v in found.found)

    older = harness.world.db.sites["acme-blog"]
    sampler._checked.clear()
    harness.world.blobs.objects.pop(object_key("acme-blog", older.live_revision or "", "/"))
    sampler.sample("acme-blog")
    assert any(v.startswith("every route of a live revision is readable") for v in found.found)


def test_places_held_over_a_dependencys_cap_are_a_violation() -> None:
    harness, ledger = healthy()
    world = harness.world
    world.dependency_store.put_settings("db:a", 1, (), "ops", "one", 0.0)
    assert violations_of(harness, ledger) == []
    world.db.counters["deprun#db:a#0"] = 2  # two attempts on a shard whose part is 1
    assert any("never more attempts running on a dependency than its cap" in v for v in violations_of(harness, ledger))
