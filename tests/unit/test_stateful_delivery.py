"""A hypothesis state machine that interleaves deliveries, duplicates, reorderings, crashes between any two steps and
lease expiries against the store ports, and checks the exactly-once invariants after every step."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sitedispatch.domain.events import OPERATOR, EventType, terminal_event_id
from sitedispatch.domain.model import PublicationMessage, PublicationStatus, QueueMessage
from sitedispatch.publication.live import object_key, receipt_key
from tests.conftest import examples
from tests.factories import present
from tests.fakes import RecordingVisibility
from tests.unit.conftest import FIXTURES, Harness, reconciler

SITES = ["site-a", "site-b"]
CRASH_POINTS = [
    "claim_lease",
    "start_attempt",
    "handler",
    "commit_before",
    "commit_after",
    "publish_send",
    "chunk_done_before",
    "chunk_done_after",
    "promote_before",
    "promote_after",
]


class SimulatedCrash(BaseException):
    """The process dies here: nothing after this point runs (BaseException: no `except Exception` catches it)."""


class CrashSwitch:
    """Arms one point: a crash there, or another worker's whole step run there (a concurrent interleaving)."""

    def __init__(self) -> None:
        self.armed: str | None = None
        self.interpose: tuple[str, Any] | None = None

    def hit(self, point: str) -> None:
        if self.interpose and self.interpose[0] == point:
            _, step = self.interpose
            self.interpose = None
            step()
        if self.armed == point:
            self.armed = None
            raise SimulatedCrash(point)


def install_crash_points(h: Harness, switch: CrashSwitch) -> None:
    """Wrap the fake ports so a crash can be injected before or after each durable step."""
    w = h.world

    def around(obj: Any, name: str, before: str | None, after: str | None) -> None:
        inner = getattr(obj, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if before:
                switch.hit(before)
            result = inner(*args, **kwargs)
            if after:
                switch.hit(after)
            return result

        setattr(obj, name, wrapped)

    around(w.sites, "claim_lease", None, "claim_lease")
    around(w.operations, "start_attempt", None, "start_attempt")
    around(w.commits, "commit", "commit_before", "commit_after")
    around(w.publication_queue, "send", "publish_send", None)
    around(w.publications, "chunk_done", "chunk_done_before", "chunk_done_after")
    around(w.publications, "publish", "promote_before", "promote_after")
    for kind, handler in list(h.handlers.items()):

        def crashing(ctx: Any, payload: Any, _inner: Any = handler) -> Any:
            switch.hit("handler")
            return _inner(ctx, payload)

        h.handlers[kind] = crashing


class DeliveryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # a running cap of one: a share of two, so the machine makes operations wait and be released
        self.h = Harness(publication_chunk_routes=2, lease_seconds=30.0, max_running_per_principal=1)
        self.switch = CrashSwitch()
        install_crash_points(self.h, self.switch)
        self.inflight: list[QueueMessage] = []  # operation messages not yet deleted (any may be delivered again)
        self.pubs: list[PublicationMessage] = []
        self.ops: list[str] = []
        self.live_seen: dict[str, int] = dict.fromkeys(SITES, 0)
        self.keys = 0

    @initialize()
    def provision_sites(self) -> None:
        for site in SITES:
            self._submit("provision", site, {"title": site, "admin_email": f"a@{site}.example"})

    def _submit(self, kind: str, site: str, params: dict[str, Any]) -> None:
        self.keys += 1
        submitted: list[str] = []
        self._move_new_publications_after(
            lambda: submitted.append(
                self.h.submitter.submit(
                    kind=kind, site_id=site, principal="p", params=params, idempotency_key=f"k{self.keys}"
                ).operation.operation_id
            )
        )
        self.ops.extend(submitted)

    @rule(site=st.sampled_from(SITES), kind=st.sampled_from(["publish", "wp_cron", "import"]))
    def submit(self, site: str, kind: str) -> None:
        if kind == "import":
            self._submit("import", site, self.h.submitter.stage_upload(site, FIXTURES / "fixture-1.2.xml", "p"))
        else:
            self._submit(kind, site, {})

    @precondition(lambda self: self.inflight)
    @rule(data=st.data(), crash=st.sampled_from([None, *CRASH_POINTS[:5]]))
    def deliver_operation(self, data: st.DataObject, crash: str | None) -> None:
        message = data.draw(st.sampled_from(self.inflight))
        self.switch.armed = crash
        self._move_new_publications_after(lambda: self._deliver(message))
        self.switch.armed = None

    def _deliver(self, message: QueueMessage) -> None:
        try:
            result = self.h.worker().process(message, RecordingVisibility())
        except SimulatedCrash:
            return  # the message stays in flight; its lease (if any) expires later
        if result.outcome.delete_message and message in self.inflight:
            self.inflight.remove(message)

    def _move_new_publications_after(self, step: Any) -> None:
        """Run `step`, then take what it sent: publication messages, and operation messages (a submit's, and those
        of operations released from waiting for the principal's share when an earlier one ended)."""
        step()
        self.pubs.extend(self.h.world.publication_queue.sent)
        self.h.world.publication_queue.sent.clear()
        self.inflight.extend(sent.message for sent in self.h.world.queue.sent)
        self.h.world.queue.sent.clear()

    @precondition(lambda self: self.inflight)
    @rule(data=st.data())
    def duplicate_operation_message(self, data: st.DataObject) -> None:
        self.inflight.append(data.draw(st.sampled_from(self.inflight)))

    @precondition(lambda self: self.pubs)
    @rule(data=st.data(), crash=st.sampled_from([None, *CRASH_POINTS[5:]]), keep=st.booleans())
    def deliver_publication(self, data: st.DataObject, crash: str | None, keep: bool) -> None:
        """Any queued publication message, in any order; `keep` leaves a copy behind (a duplicate delivery)."""
        index = data.draw(st.integers(0, len(self.pubs) - 1))
        message = self.pubs[index] if keep else self.pubs.pop(index)
        self.switch.armed = crash
        try:
            self._move_new_publications_after(lambda: self.h.publisher().process(message))
        except SimulatedCrash:
            if not keep:
                self.pubs.append(message)  # not deleted: delivered again later
        self.switch.armed = None

    @precondition(lambda self: len(self.pubs) >= 2)
    @rule(data=st.data(), point=st.sampled_from(["promote_before", "chunk_done_before", "commit_before"]))
    def concurrent_publications(self, data: st.DataObject, point: str) -> None:
        """Worker 1 is about to act at `point` when worker 2 runs another publication step to the end."""
        first, second = data.draw(st.permutations(range(len(self.pubs))))[:2]
        one, two = self.pubs[first], self.pubs[second]
        for message in (one, two):
            self.pubs.remove(message)
        self.switch.interpose = (point, lambda: self.h.publisher().process(two))
        self._move_new_publications_after(lambda: self.h.publisher().process(one))
        if self.switch.interpose is not None:  # the point was never reached: worker 2 runs afterwards
            self.switch.interpose = None
            self._move_new_publications_after(lambda: self.h.publisher().process(two))

    @rule()
    def leases_expire(self) -> None:
        self.h.world.clock.advance(self.h.settings.lease_seconds + 1)

    @invariant()
    def at_most_one_commit_per_operation_and_versions_are_a_sequence(self) -> None:
        for site in SITES:
            commits = self.h.world.commits.history(site, limit=10_000)
            assert len({c.operation_id for c in commits}) == len(commits)
            assert sorted(c.version for c in commits) == list(range(1, len(commits) + 1))
            record = self.h.world.sites.get(site)
            assert record is not None and record.head_version == len(commits)

    @invariant()
    def fences_strictly_increase_per_site(self) -> None:
        for site in SITES:
            commits = sorted(self.h.world.commits.history(site, limit=10_000), key=lambda c: c.version)
            fences = [c.fence for c in commits]
            assert fences == sorted(set(fences))

    @invariant()
    def live_seq_is_monotonic_and_live_revisions_are_complete(self) -> None:
        for site in SITES:
            record = self.h.world.sites.get(site)
            assert record is not None and record.live_seq >= self.live_seen[site]
            self.live_seen[site] = record.live_seq
            if record.live_revision:
                receipt = json.loads(self.h.world.blobs.get(receipt_key(site, record.live_revision)))
                for entry in receipt["routes"]:
                    self.h.world.blobs.get(object_key(site, record.live_revision, entry["route"]))

    @invariant()
    def the_live_publication_is_never_recorded_superseded(self) -> None:
        """(Found by the chaos campaign: a finisher that died after promoting had its live publication recorded
        superseded by the redelivery.)"""
        for site in SITES:
            record = self.h.world.sites.get(site)
            if record is not None and record.live_seq:
                publication = self.h.world.publications.get(site, record.live_seq)
                assert publication is not None and publication.status != PublicationStatus.SUPERSEDED

    def _all_ended(self) -> bool:
        return all(present(self.h.world.operations.get(op_id)).status.terminal for op_id in self.ops)

    def _resume_paused_sites(self) -> None:
        for site in SITES:
            record = self.h.world.sites.get(site)
            if record is not None and record.paused:
                self.h.world.sites.set_paused(site, False, None, OPERATOR, self.h.world.clock.now())

    def teardown(self) -> None:
        """Faults stop: expire leases, resume any site that paused itself after consecutive failures (an operator's
        step in the runbook, taken each round: deliveries out of FIFO order, such as a publish before its site's
        provision, fail and can pause the site again; found by `make fuzz`), and deliver everything until quiet;
        once quiet with an operation not ended, the reconciler's sweep runs, as its schedule would (a finisher that
        died right after its commit released no one waiting for its share, and a redelivery finds the row ended,
        holding nothing; found by `make fuzz`); every operation ends terminal."""
        for _ in range(200):
            if not self.inflight and not self.pubs:
                if self._all_ended():
                    break
                # quiet, and something has not ended: the reconciler's next sweep is what moves it
                self._move_new_publications_after(lambda: reconciler(self.h).run("reconcile"))
            self._resume_paused_sites()
            self.h.world.clock.advance(10_000)
            for message in list(self.inflight):
                self._move_new_publications_after(lambda m=message: self._deliver(m))
            while self.pubs:
                delivery = self.pubs.pop(0)
                self._move_new_publications_after(lambda m=delivery: self.h.publisher().process(m))
        assert not self.inflight and not self.pubs
        for op_id in self.ops:
            op = self.h.world.operations.get(op_id)
            assert op is not None and op.status.terminal, op
        for site in SITES:  # no publication is lost: each one went live or was overtaken by a newer one
            for publication in self.h.world.publications.list(site, limit=10_000):
                assert publication.status.value in {"published", "superseded"}, publication
        self.at_most_one_commit_per_operation_and_versions_are_a_sequence()
        self.live_seq_is_monotonic_and_live_revisions_are_complete()
        self.every_end_and_promotion_told()

    def every_end_and_promotion_told(self) -> None:
        """G9: each operation's end wrote its one event (a second write of one raises in the fakes), telling how
        it ended; each site's last promotion its publication.live."""
        events = self.h.world.db.events
        for op_id in self.ops:
            op = present(self.h.world.operations.get(op_id))
            told = events[terminal_event_id(op_id, op.epoch)].event
            assert told.detail["status"] == op.status.value and told.detail["operation_id"] == op_id
        for site in SITES:
            record = present(self.h.world.sites.get(site))
            live = [s.event for s in events.values() if s.event.type == EventType.PUBLICATION_LIVE]
            assert max((e.detail["publication_seq"] for e in live if e.site_id == site), default=0) == record.live_seq


TestDelivery = DeliveryMachine.TestCase
TestDelivery.settings = settings(
    max_examples=examples(150), stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_waiting_operations_a_finisher_died_before_releasing_are_released_by_the_reconciler() -> None:
    """The example `make fuzz` found, replayed: with a share of two, a publish waits behind both provisions; each
    provision's worker dies right after its commit, so nobody releases the publish (its redelivery finds the row
    ended, holding nothing). Once faults stop, the reconciler's sweep releases it and it runs."""
    machine = DeliveryMachine()
    machine.provision_sites()
    machine.submit(site="site-a", kind="publish")
    publish = machine.h.world.operations.get(machine.ops[-1])
    assert publish is not None and publish.waiting_for
    for site in SITES:
        message = next(m for m in machine.inflight if m.site_id == site)
        machine.switch.armed = "commit_after"
        machine._move_new_publications_after(lambda m=message: machine._deliver(m))
    machine.switch.armed = None
    for message in list(machine.inflight):  # redeliveries find the provisions ended: nothing is released
        machine._move_new_publications_after(lambda m=message: machine._deliver(m))
    assert present(machine.h.world.operations.get(publish.operation_id)).waiting_for

    machine.teardown()

    assert present(machine.h.world.operations.get(publish.operation_id)).status.value == "succeeded"
