"""An operation's timeline in the console: its own times, the next attempt a retry waits for, and what callers did
to it, oldest first."""

from __future__ import annotations

from sitedispatch.console.pages import _timeline


def test_the_timeline_merges_the_operations_times_its_next_attempt_and_its_audit_in_order() -> None:
    op = {"status": "queued", "attempt": 2, "created_at": 100.0, "queued_at": 101.0, "not_before": 160.0}
    audit = [
        {"at": 150.0, "actor": "ops-alice", "action": "redrive", "outcome": "ok"},
        {"at": 120.0, "actor": "reader", "action": "write", "outcome": "denied"},
    ]
    assert _timeline(op, audit) == [
        ("accepted", 100.0),
        ("queued", 101.0),
        ("write by reader (denied)", 120.0),
        ("redrive by ops-alice", 150.0),
        ("attempt 3 not before", 160.0),
    ]
    finished = {**op, "status": "succeeded", "started_at": 102.0, "finished_at": 103.0}
    assert [name for name, _ in _timeline(finished, [])] == ["accepted", "queued", "attempt started", "finished"]
