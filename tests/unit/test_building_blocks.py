"""Backoff, content snapshots, settings and the event-source-mapping helpers."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sitedispatch.domain.backoff import backoff_ceiling, full_jitter
from sitedispatch.domain.settings import Settings
from sitedispatch.drivers.reference.content import Manifest, default_site
from sitedispatch.local.esm import LambdaContext, records_to_delete, sqs_event
from tests.conftest import examples
from tests.factories import settings


@given(attempt=st.integers(1, 40), seed=st.integers(0, 2**32))
@hsettings(max_examples=examples(200))
def test_full_jitter_stays_within_the_exponential_ceiling(attempt: int, seed: int) -> None:
    delay = full_jitter(attempt, 2.0, 900.0, random.Random(seed))
    assert 0.0 <= delay <= min(900.0, 2.0 * 2 ** (attempt - 1))


def test_backoff_ceiling_doubles_from_base_and_stops_at_cap() -> None:
    assert [backoff_ceiling(n, 2.0, 900.0) for n in (1, 2, 3, 9, 10, 30)] == [2, 4, 8, 512, 900, 900]


def test_full_jitter_spreads_retries_over_the_whole_window() -> None:
    rng = random.Random(42)
    delays = [full_jitter(5, 2.0, 900.0, rng) for _ in range(2000)]
    # uniform on [0, 32]: a quarter of the draws in each quarter of the window, within sampling noise
    quarters = [sum(q * 8 <= d < (q + 1) * 8 for d in delays) for q in range(4)]
    assert all(400 <= n <= 600 for n in quarters), quarters


def _site(created_at: float = 1_700_000_000.0) -> Manifest:
    return default_site(
        "acme-blog",
        title="Acme",
        url="https://acme.example",
        admin_email="a@acme.example",
        locale="en_US",
        timezone="UTC",
        admin_login="admin",
        created_at=created_at,
    )[0]


def test_default_site_is_what_wp_install_leaves_behind() -> None:
    site = _site()
    titles = {(p.type, p.title, p.status) for p in site.posts}
    assert ("post", "Hello world!", "publish") in titles
    assert ("page", "Sample Page", "publish") in titles
    assert [t.name for t in site.terms] == ["Uncategorized"]
    assert site.posts[0].term_ids == (1,)
    assert site.settings.tagline == "Just another WordPress site"


def test_snapshot_bytes_are_canonical_and_name_the_revision() -> None:
    a, b = _site(), _site()
    assert a.canonical_bytes() == b.canonical_bytes() and a.revision_id == b.revision_id
    assert Manifest.from_bytes(a.canonical_bytes()) == a
    assert _site(created_at=1_700_000_001.0).revision_id != a.revision_id


def test_settings_names_and_environment_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings(attempt_budget=7)
    assert Settings.env_name("operations_queue_url") == "SITEDISPATCH_OPERATIONS_QUEUE_URL"
    with pytest.raises(KeyError):
        Settings.env_name("no_such_field")
    for key, value in s.to_environment().items():
        monkeypatch.setenv(key, value)
    assert Settings() == s
    with pytest.raises(Exception, match="frozen"):
        s.attempt_budget = 1


def test_sqs_event_has_the_lambda_record_shape() -> None:
    received = [
        {
            "MessageId": "m1",
            "ReceiptHandle": "rh1",
            "Body": '{"operation_id":"op_1","site_id":"acme-blog"}',
            "MD5OfBody": "abc",
            "Attributes": {
                "ApproximateReceiveCount": "2",
                "SentTimestamp": "1",
                "MessageGroupId": "acme-blog",
                "MessageDeduplicationId": "op_1-e0",
                "SequenceNumber": "7",
                "SenderId": "S",
                "ApproximateFirstReceiveTimestamp": "2",
            },
            "MessageAttributes": {"error_code": {"DataType": "String", "StringValue": "boom"}},
        }
    ]
    [record] = sqs_event(received, "arn:aws:sqs:us-east-1:123456789012:q.fifo", "us-east-1")["Records"]
    assert record["messageId"] == "m1" and record["receiptHandle"] == "rh1" and record["eventSource"] == "aws:sqs"
    assert record["attributes"]["MessageGroupId"] == "acme-blog"
    assert record["attributes"]["ApproximateReceiveCount"] == "2"
    assert record["eventSourceARN"].endswith(":q.fifo") and record["awsRegion"] == "us-east-1"
    assert record["messageAttributes"]["error_code"]["stringValue"] == "boom"
    assert record["messageAttributes"]["error_code"]["dataType"] == "String"


@pytest.mark.parametrize(
    ("response", "deleted"),
    [
        ({"batchItemFailures": []}, ["a", "b", "c"]),
        ({"batchItemFailures": [{"itemIdentifier": "b"}, {"itemIdentifier": "c"}]}, ["a"]),
        (None, ["a", "b", "c"]),  # a handler returning nothing succeeded for the whole batch
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, []),  # malformed: the whole batch failed
        ("not a dict", []),
    ],
)
def test_partial_batch_response_rules(response: object, deleted: list[str]) -> None:
    messages = [{"MessageId": m} for m in ("a", "b", "c")]
    assert [m["MessageId"] for m in records_to_delete(messages, response)] == deleted


def test_a_strict_event_source_mapping_loses_a_seeded_few_deletes_and_the_record_comes_again() -> None:
    """Of the completed records, those the seeded draw picks are made visible at once instead of deleted (SQS's
    at-least-once delivery, FIFO too); a failed record is left alone either way."""
    import random

    from sitedispatch.local import esm
    from sitedispatch.local.strict import DUPLICATE_RATE

    class Sqs:
        def __init__(self) -> None:
            self.deleted: list[str] = []
            self.visible_again: list[str] = []

        def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> None:
            self.deleted += [e["ReceiptHandle"] for e in Entries]

        def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> None:
            assert VisibilityTimeout == 0
            self.visible_again.append(ReceiptHandle)

    messages = [{"MessageId": m, "ReceiptHandle": f"rh-{m}"} for m in ["a", *(f"m{n}" for n in range(99))]]
    response = {"batchItemFailures": [{"itemIdentifier": "a"}]}
    sqs, seed = Sqs(), random.Random(4)
    draws = random.Random(4)
    expected_lost = [m["ReceiptHandle"] for m in messages if m["MessageId"] != "a" and draws.random() < DUPLICATE_RATE]

    settled = esm.settle(sqs, "url", messages, response, seed)

    assert expected_lost and sqs.visible_again == expected_lost
    assert sorted(sqs.deleted + sqs.visible_again) == sorted(
        m["ReceiptHandle"] for m in messages if m["MessageId"] != "a"
    )
    assert settled == len(sqs.deleted)
    plain = Sqs()
    esm.settle(plain, "url", messages, response)  # not strict: every completed record deleted
    assert plain.visible_again == [] and len(plain.deleted) == 99


def test_lambda_context_counts_down_remaining_time() -> None:
    context = LambdaContext("fn", 10, 128, "us-east-1", time.time() - 4)
    assert 5000 < context.get_remaining_time_in_millis() <= 6000
    assert context.invoked_function_arn.endswith(":function:fn") and context.aws_request_id


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
def test_unit_tests_run_without_the_network() -> None:
    import socket

    from pytest_socket import SocketBlockedError

    with pytest.raises(SocketBlockedError):
        socket.create_connection(("127.0.0.1", 9), timeout=1)


def test_the_scheduler_run_once_by_hand_exits_non_zero_when_a_schedule_failed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sitedispatch.local.scheduler as scheduler
    from sitedispatch.local.deployment import DEPLOYMENT_ENV

    monkeypatch.delenv(DEPLOYMENT_ENV, raising=False)
    ran: list[str] = []

    def handler_of(path: str) -> object:
        def handler(event: dict[str, str], context: object) -> dict[str, str]:
            ran.append(event["schedule"])
            if event["schedule"] == "reconcile":
                raise RuntimeError("the table is not there")
            return {"ok": "yes"}

        return handler

    monkeypatch.setattr(scheduler, "load_handler", handler_of)
    assert scheduler.run_scheduler("us-east-1", once=True) == 1
    assert "reconcile" in ran and len(ran) > 1  # every schedule fired once, the failure reported
    assert "the table is not there" in capsys.readouterr().out
    monkeypatch.setattr(scheduler, "load_handler", lambda path: lambda event, context: {"ok": "yes"})
    assert scheduler.run_scheduler("us-east-1", once=True) == 0
