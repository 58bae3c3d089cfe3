"""Webhooks over the fakes: each endpoint is told of its principal's events in the feed's order, signed as Standard
Webhooks says (checked by the `standardwebhooks` package's own verifier), retried on the schedule with Retry-After
honoured, disabled at a 410 or past the retry window with an event saying so; rotation, redelivery, filters,
confinement and the SSRF guard."""

from __future__ import annotations

import ipaddress
import json
import random
import time
from dataclasses import replace

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from sitedispatch.domain.errors import Conflict, InvalidInput, NotFound
from sitedispatch.domain.events import Event, EventType
from sitedispatch.domain.webhooks import (
    RETRY_AFTER_MAX_S,
    RETRY_DELAYS_S,
    RETRY_WINDOW_S,
    AttemptResult,
    Disabled,
    RetryPolicy,
    WebhookMessage,
)
from sitedispatch.operator.access import Caller
from sitedispatch.webhooks.attempt import retry_after
from sitedispatch.webhooks.deliverer import WebhookDeliverer, WebhookDeps, wake_endpoints
from sitedispatch.webhooks.destination import DestinationRefused, checked_address, parse, refusal
from sitedispatch.webhooks.endpoints import Endpoints, EndpointsDeps
from tests.fakes import FakeClock, MemoryWorld, ScriptedReceiver
from tests.unit.conftest import Harness, sweep

P, Q = Caller("p", False), Caller("q", False)
PUBLIC = {"hooks.example.com": ["93.184.216.34"], "rebind.example.com": ["93.184.216.34", "10.0.0.7"]}


def resolve(host: str, port: int) -> list[str]:
    if host in PUBLIC:
        return PUBLIC[host]
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        raise DestinationRefused(f"{host} does not resolve") from None


class Setup:
    """A world, an endpoints service and a deliverer sharing one scripted receiver and a clock at the real time
    (a Standard Webhooks verifier refuses a timestamp five minutes away from its own clock)."""

    def __init__(self, answers: list[AttemptResult] | None = None, allow_loopback: bool = False) -> None:
        self.world = MemoryWorld(clock=FakeClock(start=float(int(time.time()))))
        self.receiver = ScriptedReceiver(answers=list(answers or []))
        w = self.world
        self.endpoints = Endpoints(
            EndpointsDeps(
                w.webhooks, w.webhook_secrets, w.events, w.webhook_queue, w.audit, w.clock, allow_loopback, resolve
            )
        )
        self.deliverer = WebhookDeliverer(
            WebhookDeps(
                w.webhooks, w.events, w.webhook_secrets, self.receiver, w.webhook_queue, w.clock, rng=random.Random(3)
            )
        )
        self.placed = 0

    def place(self, *types: EventType, principal: str = "p", tenant: str | None = None) -> list[int]:
        """Events in the principal's feed, as the events worker leaves them."""
        events = []
        for t in types:
            self.placed += 1
            event = Event(f"evt_{self.placed}", t, principal, f"site-{self.placed}", self.world.clock.now(), tenant)
            with self.world.db.lock:
                self.world.db.write_event(event)
            events.append(event)
        log = self.world.events
        after = log.last_seq(principal)
        assert log.append(principal, events, after)
        return list(range(after + 1, after + 1 + len(events)))

    def wake(self, endpoint_id: str, principal: str = "p") -> float | None:
        return self.deliverer.wake(WebhookMessage(principal, endpoint_id)).retry_in

    def bodies(self) -> list[dict[str, object]]:
        return [json.loads(body) for _, _, body in self.receiver.received]


def test_each_event_is_delivered_once_in_the_feeds_order_signed_as_standard_webhooks_says() -> None:
    s = Setup()
    s.place(EventType.OPERATION_SUCCEEDED)  # before the endpoint: not told
    endpoint, secret = s.endpoints.register(P, "https://hooks.example.com/in?x=1")
    s.place(EventType.OPERATION_SUCCEEDED, EventType.PUBLICATION_LIVE, EventType.OPERATION_DEAD)
    assert s.wake(endpoint.endpoint_id) is None
    assert [b["data"]["seq"] for b in s.bodies()] == [2, 3, 4]  # type: ignore[index]
    assert [b["type"] for b in s.bodies()] == ["operation.succeeded", "publication.live", "operation.dead"]
    verifier = Webhook(secret)
    for url, headers, body in s.receiver.received:
        assert url == "https://hooks.example.com/in?x=1"
        data = verifier.verify(body, headers)  # an independent implementation's check
        assert headers["webhook-id"] == data["data"]["id"]
        with pytest.raises(WebhookVerificationError):
            verifier.verify(body.replace(b"site-", b"site_"), headers)  # tampered
    assert s.world.webhooks.get("p", endpoint.endpoint_id).cursor == 4  # type: ignore[union-attr]
    assert s.wake(endpoint.endpoint_id) is None and len(s.receiver.received) == 3  # nothing twice
    [latest, *_] = s.endpoints.deliveries(P, endpoint.endpoint_id, None, 10)
    assert latest.seq == 4 and latest.delivered and latest.attempts[0].status == 204


def test_a_receiver_down_then_failing_then_up_gets_every_event_in_order_on_the_schedule() -> None:
    down = AttemptResult(None, 0.01, error="ConnectionRefusedError")
    s = Setup(answers=[down, down, AttemptResult(500, 0.02), AttemptResult(503, 0.02, retry_after_s=7200.0)])
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/")
    s.place(EventType.OPERATION_SUCCEEDED, EventType.OPERATION_SUCCEEDED)
    waits = []
    while (wait := s.wake(endpoint.endpoint_id)) is not None:
        waits.append(wait)
        s.world.clock.advance(wait)
    for n, wait in enumerate(waits[:3]):  # the schedule, ±20 %
        assert RETRY_DELAYS_S[n] * 0.8 <= wait <= RETRY_DELAYS_S[n] * 1.2
    assert waits[3] >= 7200.0  # the receiver's Retry-After, over the schedule's 2 h ± 20 %
    ids = [b["data"]["id"] for b in s.bodies()]  # type: ignore[index]
    assert ids == ["evt_1"] * 5 + ["evt_2"]  # the second waited behind the first: in order, none lost
    [second, first] = s.endpoints.deliveries(P, endpoint.endpoint_id, None, 10)
    assert [a.status for a in first.attempts] == [None, None, 500, 503, 204] and first.delivered
    assert first.attempts[0].error == "ConnectionRefusedError" and second.delivered
    stored = s.world.webhooks.get("p", endpoint.endpoint_id)
    assert stored is not None and stored.failures == 0 and stored.next_attempt_at is None and stored.enabled


def test_a_wake_before_the_next_attempt_is_due_sends_nothing_and_says_how_long() -> None:
    s = Setup(answers=[AttemptResult(500, 0.01)])
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/")
    s.place(EventType.OPERATION_SUCCEEDED)
    first = s.wake(endpoint.endpoint_id)
    assert first is not None
    s.world.clock.advance(1.0)
    again = s.wake(endpoint.endpoint_id)
    assert again == pytest.approx(first - 1.0) and len(s.receiver.received) == 1


def test_410_disables_the_endpoint_and_an_event_says_so() -> None:
    s = Setup(answers=[AttemptResult(410, 0.01)])
    gone, _ = s.endpoints.register(P, "https://hooks.example.com/gone")
    other, _ = s.endpoints.register(P, "https://hooks.example.com/other")
    s.place(EventType.OPERATION_SUCCEEDED, EventType.OPERATION_SUCCEEDED)
    assert s.wake(gone.endpoint_id) is None
    stored = s.world.webhooks.get("p", gone.endpoint_id)
    assert stored is not None and stored.disabled == Disabled.GONE and len(s.receiver.received) == 1
    [event] = [e.event for e in s.world.db.events.values() if e.event.type == EventType.WEBHOOK_DISABLED]
    assert event.detail == {"endpoint_id": gone.endpoint_id, "reason": "gone"} and event.principal == "p"
    assert "hooks.example.com" not in json.dumps(event.wire())  # a URL may carry a receiver's token
    s.wake(gone.endpoint_id)
    assert len(s.receiver.received) == 1  # disabled: nothing more
    s.place(EventType.OPERATION_DEAD)
    assert s.wake(other.endpoint_id) is None
    assert [b["data"]["id"] for b in s.bodies()[1:]] == ["evt_1", "evt_2", "evt_3"]  # type: ignore[index]


def test_an_endpoint_failing_past_the_retry_window_is_disabled_after_at_least_24_hours() -> None:
    s = Setup()
    s.receiver.then = AttemptResult(500, 0.01)
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/")
    s.place(EventType.OPERATION_SUCCEEDED)
    started = s.world.clock.now()
    while (wait := s.wake(endpoint.endpoint_id)) is not None:
        s.world.clock.advance(wait)
    stored = s.world.webhooks.get("p", endpoint.endpoint_id)
    assert stored is not None and stored.disabled == Disabled.FAILING
    attempts = s.endpoints.deliveries(P, endpoint.endpoint_id, None, 1)[0].attempts
    assert attempts[-1].at - attempts[0].at >= RETRY_WINDOW_S  # tried for the whole window
    assert len(attempts) == len(RETRY_DELAYS_S) + 1
    assert s.world.clock.now() - started < RETRY_WINDOW_S * 1.5
    events = [e.event for e in s.world.db.events.values() if e.event.type == EventType.WEBHOOK_DISABLED]
    assert [e.detail["reason"] for e in events] == ["failing"]
    enabled = s.endpoints.enable(P, endpoint.endpoint_id)  # a person enables it: from where it stopped
    assert enabled.enabled and enabled.failures == 0
    s.receiver.then = AttemptResult(200, 0.01)
    assert s.wake(endpoint.endpoint_id) is None
    assert s.endpoints.deliveries(P, endpoint.endpoint_id, None, 1)[0].delivered


def test_the_schedule_is_jittered_and_retry_after_is_honoured_up_to_twelve_hours() -> None:
    policy, rng = RetryPolicy(), random.Random(1)
    for failures, base in enumerate(RETRY_DELAYS_S, start=1):
        waits = {policy.delay(failures, None, rng) for _ in range(50)}
        assert all(base * 0.8 <= w <= base * 1.2 for w in waits) and len(waits) > 1
    assert policy.delay(99, None, rng) <= RETRY_DELAYS_S[-1] * 1.2
    assert policy.delay(1, 86400.0 * 3, rng) == RETRY_AFTER_MAX_S
    assert retry_after("120", 0.0) == 120.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1445412480.0 - 60) == pytest.approx(60.0)
    assert retry_after("soon", 0.0) is None and retry_after(None, 0.0) is None


def test_during_a_rotation_both_secrets_sign_then_only_the_new_one() -> None:
    s = Setup()
    endpoint, old = s.endpoints.register(P, "https://hooks.example.com/")
    new, until = s.endpoints.rotate(P, endpoint.endpoint_id)
    s.place(EventType.OPERATION_SUCCEEDED)
    s.wake(endpoint.endpoint_id)
    _, headers, body = s.receiver.received[-1]
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(body, headers)  # a receiver not yet told of the new secret
    Webhook(new).verify(body, headers)
    assert until == pytest.approx(s.world.clock.now() + 24 * 3600)
    assert s.world.webhook_secrets.signing(endpoint.endpoint_id, until + 1) == [new]


def test_filters_choose_the_events_and_the_cursor_passes_the_rest() -> None:
    s = Setup()
    dead, _ = s.endpoints.register(P, "https://hooks.example.com/dead", types=[EventType.OPERATION_DEAD])
    tenant, _ = s.endpoints.register(P, "https://hooks.example.com/t", tenant="acme")
    s.place(EventType.OPERATION_SUCCEEDED, EventType.OPERATION_DEAD)
    s.place(EventType.OPERATION_SUCCEEDED, tenant="acme")
    s.wake(dead.endpoint_id)
    s.wake(tenant.endpoint_id)
    assert [(url.rsplit("/", 1)[1], json.loads(b)["data"]["seq"]) for url, _, b in s.receiver.received] == [
        ("dead", 2),
        ("t", 3),
    ]
    assert s.world.webhooks.get("p", dead.endpoint_id).cursor == 3  # type: ignore[union-attr]


def test_a_redelivery_sends_a_range_again_before_going_on() -> None:
    s = Setup()
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/", types=[EventType.OPERATION_SUCCEEDED])
    s.place(EventType.OPERATION_SUCCEEDED, EventType.SITE_PAUSED, EventType.OPERATION_SUCCEEDED)
    s.wake(endpoint.endpoint_id)
    s.place(EventType.OPERATION_SUCCEEDED)
    s.endpoints.redeliver(P, endpoint.endpoint_id, 1, 3)  # places 1, 2, 3
    assert s.world.webhook_queue.sent[-1].endpoint_id == endpoint.endpoint_id  # woken
    with pytest.raises(Conflict):
        s.endpoints.redeliver(P, endpoint.endpoint_id, 1)  # one at a time
    s.wake(endpoint.endpoint_id)
    assert [b["data"]["seq"] for b in s.bodies()] == [1, 3, 1, 3, 4]  # type: ignore[index]
    [four, three, one] = s.endpoints.deliveries(P, endpoint.endpoint_id, None, 10)
    assert [a.redelivery for a in three.attempts] == [False, True] and four.seq == 4 and one.seq == 1
    for bad in ((0, 1), (3, 0), (1, 1001)):
        with pytest.raises(InvalidInput):
            s.endpoints.redeliver(P, endpoint.endpoint_id, *bad)
    with pytest.raises(Conflict, match="not there yet"):
        s.endpoints.redeliver(P, endpoint.endpoint_id, 4, 2)  # 5 is not in the feed


def test_another_principals_endpoints_and_deliveries_are_unknown_to_a_caller() -> None:
    s = Setup()
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/")
    for act in (
        lambda: s.endpoints.get(Q, endpoint.endpoint_id),
        lambda: s.endpoints.deliveries(Q, endpoint.endpoint_id, None, 10),
        lambda: s.endpoints.delete(Q, endpoint.endpoint_id),
        lambda: s.endpoints.rotate(Q, endpoint.endpoint_id),
        lambda: s.endpoints.enable(Q, endpoint.endpoint_id),
        lambda: s.endpoints.redeliver(Q, endpoint.endpoint_id, 1),
        lambda: s.endpoints.get(Caller("ops", True), endpoint.endpoint_id),
    ):
        with pytest.raises(NotFound):
            act()
    assert s.endpoints.owned(Q) == [] and s.endpoints.owned(P) == [endpoint]
    s.place(EventType.OPERATION_SUCCEEDED, principal="q")
    s.wake(endpoint.endpoint_id)
    assert s.receiver.received == []  # q's events are not p's
    s.endpoints.delete(P, endpoint.endpoint_id)
    assert s.endpoints.owned(P) == [] and endpoint.endpoint_id not in s.world.webhook_secrets.secrets
    actions = [(e.actor, e.action, e.outcome) for e in s.world.audit.entries]
    assert ("p", "webhook.register", "ok") in actions and ("p", "webhook.delete", "ok") in actions


def test_the_events_worker_wakes_the_endpoints_that_want_what_was_placed() -> None:
    s = Setup()
    dead, _ = s.endpoints.register(P, "https://hooks.example.com/", types=[EventType.OPERATION_DEAD])
    every, _ = s.endpoints.register(P, "https://hooks.example.com/")
    s.place(EventType.OPERATION_SUCCEEDED)
    entries = s.world.events.read("p", 0, 10)
    assert wake_endpoints(s.world.webhooks, s.world.webhook_queue, "p", entries) == 1
    assert [m.endpoint_id for m in s.world.webhook_queue.sent] == [every.endpoint_id]
    assert wake_endpoints(s.world.webhooks, s.world.webhook_queue, "q", entries) == 0
    assert dead.endpoint_id not in {m.endpoint_id for m in s.world.webhook_queue.sent}


def test_a_person_changing_the_endpoint_during_an_attempt_wins_and_the_wake_looks_again() -> None:
    s = Setup()
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/")
    s.place(EventType.OPERATION_SUCCEEDED)
    original = s.receiver.send

    def meanwhile(url: str, headers: object, body: bytes) -> AttemptResult:
        s.endpoints.delete(P, endpoint.endpoint_id)
        return original(url, headers, body)  # type: ignore[arg-type]

    s.receiver.send = meanwhile  # type: ignore[method-assign]
    assert s.wake(endpoint.endpoint_id) == 1.0
    assert s.wake(endpoint.endpoint_id) is None  # gone: nothing to do


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com/", "starts with https://"),
        ("https://127.0.0.1/", "loopback"),
        ("https://[::1]:8443/", "IPv4 address"),
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("https://10.1.2.3/", "private"),
        ("https://192.168.0.1/", "private"),
        ("https://[fd00:ec2::254]/", "IPv4 address"),
        ("https://100.64.0.1/", "not public"),
        ("https://0.0.0.0/", "unspecified"),
        ("https://224.0.0.1/", "multicast"),
        ("https://rebind.example.com/", "10.0.0.7"),
        ("https://user:pw@hooks.example.com/", "no user"),
        ("https://nowhere.invalid/", "does not resolve"),
        ("ftp://hooks.example.com/", "https://"),
        ("https://hooks.example.com/a b", "without spaces"),
        ("https://hooks.example.com/\u00e9", "printable ASCII"),
        ("https://hooks.example.com/#frag", "no fragment"),
    ],
)
def test_a_deployed_stack_refuses_what_is_not_a_public_https_host(url: str, why: str) -> None:
    s = Setup()
    with pytest.raises(InvalidInput, match=why.replace("(", r"\(")):
        s.endpoints.register(P, url)
    assert s.endpoints.owned(P) == [] and s.world.webhook_secrets.secrets == {}


def test_a_name_resolving_to_an_ipv6_address_is_judged_by_it() -> None:
    assert refusal("::1", False) == "a loopback address" and refusal("::ffff:127.0.0.1", False) == "a loopback address"
    assert refusal("fd00:ec2::254", False) == "a private address"  # the metadata service's IPv6 address
    assert refusal("fe80::1", False) is not None and refusal("2606:4700::6810:84e5", False) is None


def test_the_local_runtime_allows_loopback_and_http_only_by_its_setting() -> None:
    assert checked_address(parse("http://127.0.0.1:8080/h", True), True, resolve) == "127.0.0.1"
    assert refusal("127.0.0.1", True) is None and refusal("10.0.0.1", True) == "a private address"
    with pytest.raises(DestinationRefused):
        checked_address(parse("http://10.0.0.1/", True), True, resolve)  # loopback only, not private
    s = Setup(allow_loopback=True)
    endpoint, _ = s.endpoints.register(P, "http://127.0.0.1:9/")
    assert endpoint.url == "http://127.0.0.1:9/"


def test_the_reconciler_wakes_each_endpoint_whose_wake_was_lost_and_no_other(harness: Harness) -> None:
    w = harness.world
    endpoints = Endpoints(
        EndpointsDeps(w.webhooks, w.webhook_secrets, w.events, w.webhook_queue, w.audit, w.clock, False, resolve)
    )
    url = "https://hooks.example.com/"
    quiet, due_long_ago, due_later, disabled, redelivering = (endpoints.register(P, url)[0] for _ in range(5))
    now = w.clock.now()
    for endpoint, change in (
        (due_long_ago, {"next_attempt_at": now - 120}),
        (due_later, {"next_attempt_at": now + 120}),
        (disabled, {"disabled": Disabled.GONE, "next_attempt_at": now - 120}),
        (redelivering, {"replay": (1, 1)}),
    ):
        assert w.webhooks.save(replace(endpoint, **change)) is not None
    w.webhook_queue.sent.clear()
    assert sweep(harness)["webhooks_woken"] == 2
    woken = {m.endpoint_id for m in w.webhook_queue.sent}
    assert woken == {due_long_ago.endpoint_id, redelivering.endpoint_id} and quiet.endpoint_id not in woken


def test_a_wake_lost_after_events_took_their_places_is_sent_when_the_batch_comes_back() -> None:
    from sitedispatch.domain.events import EventMessage
    from sitedispatch.events.worker import EventsDeps, EventsWorker

    s = Setup()
    endpoint, _ = s.endpoints.register(P, "https://hooks.example.com/")
    w = s.world
    event = Event("evt_lost", EventType.OPERATION_SUCCEEDED, "p", "s", w.clock.now())
    with w.db.lock:
        w.db.write_event(event)

    class Failing:
        def send(self, message: WebhookMessage) -> None:
            raise RuntimeError("SQS unavailable")

    with pytest.raises(RuntimeError):
        EventsWorker(EventsDeps(w.events, w.event_bus, w.webhooks, Failing())).process([EventMessage.of(event)])
    assert w.events.last_seq("p") == 1 and w.webhook_queue.sent == []  # placed, nobody woken
    again = EventsWorker(EventsDeps(w.events, w.event_bus, w.webhooks, w.webhook_queue))
    assert again.process([EventMessage.of(event)]) == 0  # the batch again: nothing placed twice
    assert [m.endpoint_id for m in w.webhook_queue.sent] == [endpoint.endpoint_id]
    assert s.wake(endpoint.endpoint_id) is None and [b["data"]["id"] for b in s.bodies()] == ["evt_lost"]  # type: ignore[index]
