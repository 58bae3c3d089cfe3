"""G9, told by webhooks: through the HTTP API and the real functions on the local cloud, an endpoint a principal
registers gets each of its events, signed (checked by the `standardwebhooks` package's verifier), in the feed's
order, across a receiver that is down, then failing, then up; 410 disables it with an event saying so; a redelivery
and a rotation work; another principal sees none of it; a deployed configuration refuses loopback."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from sitedispatch.client import ApiClient
from sitedispatch.domain.errors import InvalidInput, NotFound
from sitedispatch.local.receiver import WebhookReceiver
from tests.conftest import Cloud, local_api, pump, wait_for
from tests.factories import PROVISION
from tests.integration.conftest import as_

SCALE = "0.001"  # the retry schedule in milliseconds (5 ms, 300 ms, 1.8 s, ...); 24 h becomes 86 s


@pytest.fixture(autouse=True)
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SITEDISPATCH_WEBHOOK_RETRY_SCALE", SCALE)


def submit(client: ApiClient, site: str) -> str:
    body: dict[str, Any] = {"kind": "provision", "site_id": site, "params": PROVISION}
    return str(client.call("POST", "/operations", body=body)["operation_id"])


def feed_ids(client: ApiClient) -> list[str]:
    return [e["id"] for e in client.call("GET", "/events", query={"limit": 500})["events"]]


def deliveries(client: ApiClient, endpoint_id: str) -> list[dict[str, Any]]:
    return list(client.call("GET", f"/webhooks/{endpoint_id}/deliveries", query={"limit": 100})["deliveries"])


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (yet): a receiver that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.guarantee
def test_a_receiver_down_then_failing_then_up_is_told_of_every_event_in_order(cloud: Cloud, api: str) -> None:
    # Given an endpoint registered through the API, and its receiver down
    producer, other = as_(api, "control-plane"), as_(api, "other-producer")
    port = closed_port()
    url = f"http://127.0.0.1:{port}/hook"
    created = producer.call("POST", "/webhooks", body={"url": url, "description": "the control plane's"})
    endpoint_id, secret = created["endpoint"]["endpoint_id"], created["secret"]
    assert secret.startswith("whsec_") and created["endpoint"]["enabled"]

    # When two provisions run, and their events meet a closed port
    ops = [submit(producer, "hook-site-1"), submit(producer, "hook-site-2")]
    wait_for(
        lambda: (
            pump(cloud) >= 0
            and any(a["status"] is None for d in deliveries(producer, endpoint_id) for a in d["attempts"])
        ),
        what="an attempt that found nothing listening",
    )

    # and then the receiver comes up answering 500 twice, then 204
    receiver = WebhookReceiver(secrets=[secret], answers=[500, 500])
    with receiver.serving(port):
        expected = wait_for(lambda: len(feed_ids(producer)) >= 4 and feed_ids(producer), what="the events")
        wait_for(
            lambda: pump(cloud) >= 0 and len({r.data["id"] for r in receiver.accepted()}) == len(expected),
            timeout_s=60,
            what="every event accepted",
        )

        # Then every event arrived, verified, in the feed's order, each accepted once
        accepted = [r.data["id"] for r in receiver.accepted()]
        assert accepted == expected
        assert all(r.verified for r in receiver.received)
        assert {r.data["operation_id"] for r in receiver.accepted() if "operation_id" in r.data} == set(ops)
        assert all(r.headers["webhook-id"] == r.data["id"] for r in receiver.received)
        first = deliveries(producer, endpoint_id)[-1]
        statuses = [a["status"] for a in first["attempts"]]
        assert statuses[-3:] == [500, 500, 204] and set(statuses[:-3]) == {None} and first["delivered"]
        assert first["attempts"][0]["error"]  # what the first attempts met, for a person to read
        shown = producer.call("GET", f"/webhooks/{endpoint_id}")
        assert shown["cursor"] == len(expected) and shown["failures"] == 0 and shown["enabled"]

        # and a redelivery sends places 1-2 again, with their ids
        producer.call("POST", f"/webhooks/{endpoint_id}/redeliver", body={"from_seq": 1, "count": 2})
        wait_for(lambda: pump(cloud) >= 0 and len(receiver.accepted()) == len(expected) + 2, what="the redelivery")
        assert [r.data["id"] for r in receiver.accepted()[-2:]] == expected[:2]

        # and after a rotation, deliveries carry both signatures: either secret verifies
        rotated = producer.call("POST", f"/webhooks/{endpoint_id}/rotate")
        receiver.secrets = [rotated["secret"]]
        submit(producer, "hook-site-3")
        wait_for(lambda: pump(cloud) >= 0 and len(receiver.accepted()) > len(expected) + 2, what="a delivery")
        last = receiver.received[-1]
        assert last.verified and len(last.headers["webhook-signature"].split(" ")) == 2
        assert WebhookReceiver(secrets=[secret]).verify(last.body, last.headers)

    # and another principal sees none of it
    assert other.call("GET", "/webhooks") == {"endpoints": []}
    for method, path, body in (
        ("GET", f"/webhooks/{endpoint_id}", None),
        ("GET", f"/webhooks/{endpoint_id}/deliveries", None),
        ("POST", f"/webhooks/{endpoint_id}/redeliver", {"from_seq": 1}),
        ("POST", f"/webhooks/{endpoint_id}/rotate", None),
        ("DELETE", f"/webhooks/{endpoint_id}", None),
    ):
        with pytest.raises(NotFound):
            other.call(method, path, body=body)
    assert producer.call("DELETE", f"/webhooks/{endpoint_id}")["endpoint_id"] == endpoint_id
    assert producer.call("GET", "/webhooks") == {"endpoints": []}


def test_410_disables_an_endpoint_and_its_principal_is_told(cloud: Cloud, api: str) -> None:
    producer = as_(api, "control-plane")
    gone, told = WebhookReceiver(then=410), WebhookReceiver()
    with gone.serving() as gone_url, told.serving() as told_url:
        first = producer.call("POST", "/webhooks", body={"url": gone_url})
        second = producer.call("POST", "/webhooks", body={"url": told_url, "types": ["webhook.disabled"]})
        told.secrets = [second["secret"]]
        submit(producer, "gone-site")
        endpoint_id = first["endpoint"]["endpoint_id"]
        wait_for(
            lambda: pump(cloud) >= 0 and told.accepted(),
            what="the webhook.disabled event at the other endpoint",
        )
        [event] = [r.data for r in told.accepted()]
        assert event["type"] == "webhook.disabled" and event["endpoint_id"] == endpoint_id
        assert event["reason"] == "gone" and told.received[0].verified
        assert len(gone.received) == 1
        shown = producer.call("GET", f"/webhooks/{endpoint_id}")
        assert shown["enabled"] is False and shown["disabled"] == "gone"

        gone.then = 204  # it is back: enabled again, it goes on from where it stopped
        producer.call("POST", f"/webhooks/{endpoint_id}/enable")
        wait_for(lambda: pump(cloud) >= 0 and gone.accepted(), what="the delivery after enabling")
        assert gone.accepted()[0].data["id"] == gone.received[0].headers["webhook-id"]


def test_a_deployed_configuration_refuses_loopback_private_and_metadata_urls(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SITEDISPATCH_WEBHOOKS_ALLOW_LOOPBACK", "false")
    with local_api() as url:
        producer = as_(url, "control-plane")
        for refused in (
            "https://127.0.0.1/hook",
            "https://localhost/hook",
            "https://169.254.169.254/latest/meta-data/",
            "https://10.0.0.8/hook",
            "https://[::1]/hook",
            "http://hooks.example.com/hook",
        ):
            with pytest.raises(InvalidInput):
                producer.call("POST", "/webhooks", body={"url": refused})
        assert producer.call("GET", "/webhooks") == {"endpoints": []}


def test_an_attempt_connects_to_the_address_it_checked_and_names_the_host_it_was_given() -> None:
    """DNS rebinding: the sender resolves once, checks every address, and connects to the checked one (the URL's
    host in `Host`); a name that now resolves to a private address is not connected to at all."""
    from sitedispatch.webhooks.attempt import HttpSender
    from sitedispatch.webhooks.destination import DestinationRefused

    answers = {"hooks.test": ["127.0.0.1"], "rebound.test": ["10.0.0.9"]}
    resolved: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        resolved.append(host)
        if host not in answers:
            raise DestinationRefused(f"{host} does not resolve")
        return answers[host]

    receiver = WebhookReceiver(answers=[503], then=200)
    with receiver.serving() as url:
        port = url.split(":")[2].split("/")[0]
        sender = HttpSender(allow_loopback=True, resolve=resolve)
        failed = sender.send(f"http://hooks.test:{port}/in?x=1", {"webhook-id": "evt_1"}, b"{}")
        sent = sender.send(f"http://hooks.test:{port}/in?x=1", {"webhook-id": "evt_2"}, b"{}")
        refused = sender.send(f"http://rebound.test:{port}/in", {"webhook-id": "evt_3"}, b"{}")
    assert (failed.status, sent.status, sent.accepted, failed.accepted) == (503, 200, True, False)
    assert [r.headers["host"] for r in receiver.received] == [f"hooks.test:{port}"] * 2
    assert [r.headers["webhook-id"] for r in receiver.received] == ["evt_1", "evt_2"]  # nothing reached for evt_3
    assert refused.status is None and refused.error is not None and "a private address" in refused.error
    assert resolved == ["hooks.test", "hooks.test", "rebound.test"]
    closed = HttpSender(allow_loopback=True).send(f"http://127.0.0.1:{closed_port()}/", {}, b"{}")
    assert closed.status is None and closed.error and "Connection" in closed.error
