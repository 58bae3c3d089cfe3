"""G9, told not polled: every transition's event reaches its principal's feed, in order and confined, and the bus,
through the real functions on the local cloud, even when the message that should have carried it was lost."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from sitedispatch.client import ApiClient
from sitedispatch.domain.errors import Forbidden
from sitedispatch.domain.events import EVENT_SOURCE, EventType
from sitedispatch.domain.model import Status
from sitedispatch.reconciler import ReconcilerPolicy
from tests.conftest import Cloud, pump, wait_for
from tests.factories import PROVISION, present
from tests.integration.conftest import as_


def submit(client: ApiClient, site: str, tenant: str | None = None) -> str:
    body: dict[str, Any] = {"kind": "provision", "site_id": site, "params": PROVISION}
    if tenant:
        body["tenant"] = tenant
    return str(client.call("POST", "/operations", body=body)["operation_id"])


def feed(client: ApiClient, **query: Any) -> list[dict[str, Any]]:
    """Every event of the caller's feed, following the cursor page by page."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = client.call("GET", "/events", query={"after": after, "limit": 2, **query})
        events += page["events"]
        if page["after"] == after:
            return events
        after = page["after"]


@pytest.mark.guarantee
def test_each_principal_is_told_of_its_own_work_in_order_and_of_nobody_elses(cloud: Cloud, api: str) -> None:
    # Given two principals, one acting for two tenants
    a, b = as_(api, "control-plane"), as_(api, "other-producer")
    a_ops = [submit(a, "cust-1-site", "cust-1"), submit(a, "cust-2-site", "cust-2")]
    b_ops = [submit(b, "b-site")]
    cancelled = submit(a, "cust-1-site", "cust-1")  # queued behind the first: cancelled before it runs
    a.call("POST", f"/operations/{cancelled}/cancel", body={"reason": "changed my mind"})

    # When their work runs (every queue drained through the real functions, events included)
    pump(cloud)

    # Then each principal's feed holds its own events, in feed order (1, 2, ...), each once
    mine = feed(a)
    assert [e["seq"] for e in mine] == list(range(1, len(mine) + 1))
    assert len({e["id"] for e in mine}) == len(mine)
    ended = {e["operation_id"]: e for e in mine if e["type"].startswith("operation.")}
    assert set(ended) == {*a_ops, cancelled}
    assert {ended[o]["type"] for o in a_ops} == {EventType.OPERATION_SUCCEEDED.value}
    assert ended[cancelled]["type"] == EventType.OPERATION_CANCELLED.value
    assert sorted(e["site_id"] for e in mine if e["type"] == "publication.live") == ["cust-1-site", "cust-2-site"]
    assert all(e["principal"] == "control-plane" for e in mine)
    assert ended[a_ops[0]]["tenant"] == "cust-1" and ended[a_ops[0]]["kind"] == "provision"
    assert "changed my mind" not in json.dumps(mine)  # a reason given by a caller is not an outcome
    theirs = feed(b)
    assert {e.get("operation_id") for e in theirs if e["type"].startswith("operation.")} == set(b_ops)
    assert not {e["id"] for e in theirs} & {e["id"] for e in mine}

    # and filters choose what is returned while the cursor moves on
    only = feed(a, type=["operation.succeeded"], tenant="cust-2")
    assert [e["operation_id"] for e in only] == [a_ops[1]]
    page = a.call("GET", "/events", query={"after": len(mine), "wait_s": 0})
    assert page == {"events": [], "after": len(mine)}

    # and nobody reads another's feed; an operator names whose it reads
    with pytest.raises(Forbidden):
        b.call("GET", "/events", query={"principal": "control-plane"})
    assert feed(as_(api, "operator"), principal="control-plane") == mine


def test_an_event_whose_message_was_lost_is_sent_again_by_the_reconciler(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sitedispatch.aws.events import SqsEventQueue

    # Given a commit whose event message is lost (the process that committed died before its send)
    def lost(self: SqsEventQueue, message: Any) -> None:
        raise ConnectionError("the process died before this send")

    sent = SqsEventQueue.send
    monkeypatch.setattr(SqsEventQueue, "send", lost)
    op_id = (
        cloud.deps.submitter()
        .submit(kind="provision", site_id="lost-site", principal="p", params=PROVISION)
        .operation.operation_id
    )
    pump(cloud)
    assert present(cloud.deps.operations.get(op_id)).status == Status.SUCCEEDED
    assert cloud.deps.events.read("p", 0, 10) == []  # written with the commit, never delivered
    monkeypatch.setattr(SqsEventQueue, "send", sent)  # the next processes send again

    # When the reconciler sweeps (its grace passed)
    reconciler = cloud.as_function("reconciler").reconciler()  # as its deployed role
    reconciler.policy = ReconcilerPolicy(orphan_grace_s=0.0)
    sweep = wait_for(
        lambda: (s := reconciler.run("reconcile")) is not None and s.repaired["events_resent"] >= 2 and s,
        timeout_s=5,
        what="the undelivered events (an index) found",
    )
    assert sweep.repaired["events_resent"] == 2  # the operation's end and its publication going live
    pump(cloud)

    # Then the feed holds each event once, and nothing is left undelivered
    types = [entry.event.type for entry in cloud.deps.events.read("p", 0, 10)]
    assert sorted(types) == sorted([EventType.OPERATION_SUCCEEDED, EventType.PUBLICATION_LIVE])
    wait_for(lambda: cloud.deps.events.undelivered(before=2e9) == [], timeout_s=5, what="nothing undelivered")


def test_events_reach_the_bus_where_a_rule_routes_one_tenants_successes_to_a_queue(cloud: Cloud) -> None:
    # Given the README's rule: one tenant's succeeded operations to an SQS queue
    # (the target queue beside the bus: on the LocalStack run the stack's queues are LocalStack's, the bus moto's)
    session = cloud.deps.session
    events, sqs = session.client("events"), session.client("sqs", endpoint_url=cloud.endpoint)
    queue_url = sqs.create_queue(QueueName=f"{cloud.settings.event_bus}-cust-1")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {
        "source": [EVENT_SOURCE],
        "detail-type": [EventType.OPERATION_SUCCEEDED.value],
        "detail": {"tenant": ["cust-1"], "kind": ["provision"]},
    }
    bus = cloud.settings.event_bus
    events.put_rule(Name="cust-1-succeeded", EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(Rule="cust-1-succeeded", EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn}])

    # When two tenants' provisions succeed
    submitter = cloud.deps.submitter()
    wanted = submitter.submit(kind="provision", site_id="c1-site", principal="p", params=PROVISION, tenant="cust-1")
    submitter.submit(kind="provision", site_id="c2-site", principal="p", params=PROVISION, tenant="cust-2")
    pump(cloud)

    # Then the queue holds the one event the rule matches, as EventBridge delivers it
    received: list[dict[str, Any]] = []

    def arrived() -> bool:
        for message in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
            received.append(json.loads(message["Body"]))
        return bool(received)

    wait_for(arrived, timeout_s=5, what="the rule's event in its queue")
    [delivered] = received
    assert delivered["source"] == EVENT_SOURCE and delivered["detail-type"] == "operation.succeeded"
    assert delivered["detail"]["operation_id"] == wanted.operation.operation_id
    assert delivered["detail"]["tenant"] == "cust-1"


@pytest.mark.guarantee
def test_a_reader_following_the_cursor_while_events_are_written_sees_each_once_in_order(cloud: Cloud, api: str) -> None:
    # Given a reader long-polling the feed from the start
    reader = as_(api, "p")
    seen: list[dict[str, Any]] = []
    stop = threading.Event()

    def follow() -> None:
        after = 0
        while not stop.is_set():
            page = reader.call("GET", "/events", query={"after": after, "wait_s": 0.5, "limit": 3})
            seen.extend(page["events"])
            after = page["after"]

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()

    # When twelve operations commit, their events written and placed while it reads
    submitter = cloud.deps.submitter()
    ops = [
        submitter.submit(kind="provision", site_id=f"site-{n:02d}", principal="p", params=PROVISION).operation
        for n in range(12)
    ]
    pump(cloud)
    try:
        wait_for(lambda: len(seen) >= 24, timeout_s=20, what="the reader to see 24 events")
    finally:
        stop.set()
        thread.join(timeout=5)

    # Then it saw each event once, in feed order, and every one written
    assert [e["seq"] for e in seen] == list(range(1, 25))
    ended = [e["operation_id"] for e in seen if e["type"] == "operation.succeeded"]
    assert sorted(ended) == sorted(op.operation_id for op in ops)
