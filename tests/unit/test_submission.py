"""Submit: validation before any write, deterministic ids, idempotency, the message shape."""

from __future__ import annotations

import json

import pytest

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import IdempotencyConflict, InvalidInput
from sitedispatch.domain.model import Status, operation_id_for, sha256_hex, stable_identity
from sitedispatch.domain.schemas import ProvisionInput
from sitedispatch.operations.submission import INLINE_INPUT_BYTES
from sitedispatch.operations.worker import op_input
from tests.factories import PROVISION
from tests.unit.conftest import Harness


def _nothing_written(h: Harness) -> bool:
    w = h.world
    return not (w.db.operations or w.db.sites or w.blobs.objects or w.queue.sent)


def test_accepted_operation_is_queued_with_its_input_and_a_site_grouped_message(harness: Harness) -> None:
    result = harness.submitter.submit(
        kind="provision", site_id="acme-blog", principal="tenant-a", params=PROVISION, idempotency_key="k1"
    )

    op = result.operation
    assert result.created and op.status == Status.QUEUED and op.queued_at is not None
    assert op.operation_id == operation_id_for("tenant-a", "acme-blog", "provision", "k1")
    stored = op_input(harness.world.blobs, op)
    assert sha256_hex(stored) == op.input_digest
    assert ProvisionInput.model_validate_json(stored).title == "Acme Blog"
    assert op.inline_input is not None and harness.world.blobs.objects == {}  # small: in the row, nothing in S3
    [sent] = harness.world.queue.sent
    assert json.loads(sent.message.to_body()) == {
        "operation_id": op.operation_id,
        "site_id": "acme-blog",
        "principal": "tenant-a",
        "lane": "operations",
    }
    assert sent.dedup_id == f"{op.operation_id}-e0" and sent.lane == "operations"
    assert harness.world.sites.get("acme-blog").principal == "tenant-a"  # type: ignore[union-attr]


def test_an_input_over_the_inline_size_is_stored_in_s3_and_read_from_there(harness: Harness) -> None:
    params = {**PROVISION, "url": "https://example.org/" + "a" * INLINE_INPUT_BYTES}
    op = harness.submitter.submit(kind="provision", site_id="acme-blog", principal="tenant-a", params=params).operation

    assert op.inline_input is None and harness.world.blobs.get(op.input_key) == op_input(harness.world.blobs, op)
    assert sha256_hex(harness.world.blobs.get(op.input_key)) == op.input_digest
    assert harness.deliver(op.operation_id)[0].outcome == Outcome.SUCCEEDED


def test_same_key_same_input_returns_the_same_operation_without_a_second_message(harness: Harness) -> None:
    first = harness.submitter.submit(
        kind="provision", site_id="acme-blog", principal="p", params=PROVISION, idempotency_key="k"
    )
    # the same input spelled differently (key order) is the same canonical input
    again = harness.submitter.submit(
        kind="provision",
        site_id="acme-blog",
        principal="p",
        params={"admin_email": "admin@acme.example", "title": "Acme Blog"},
        idempotency_key="k",
    )

    assert not again.created and again.operation.operation_id == first.operation.operation_id
    assert len(harness.world.queue.sent) == 1
    # strings are taken as sent (what the OpenAPI document states is what is checked): spaces make another input
    with pytest.raises(IdempotencyConflict):
        harness.submitter.submit(
            kind="provision",
            site_id="acme-blog",
            principal="p",
            params={"admin_email": "admin@acme.example", "title": " Acme Blog "},
            idempotency_key="k",
        )


def test_same_key_different_input_is_an_idempotency_conflict(harness: Harness) -> None:
    harness.submitter.submit(
        kind="provision", site_id="acme-blog", principal="p", params=PROVISION, idempotency_key="k"
    )
    with pytest.raises(IdempotencyConflict, match="different input"):
        harness.submitter.submit(
            kind="provision",
            site_id="acme-blog",
            principal="p",
            params={**PROVISION, "title": "Other"},
            idempotency_key="k",
        )
    assert len(harness.world.db.operations) == 1


def test_without_a_key_every_submit_is_a_new_operation(harness: Harness) -> None:
    a = harness.submit(site="site-one")
    b = harness.submit(site="site-two")
    assert a != b


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "provision", "site_id": "Acme_Blog"}, "site"),
        ({"kind": "provision", "site_id": "ab"}, "site"),
        ({"kind": "teleport", "site_id": "acme-blog"}, "kind"),
        ({"kind": "provision", "site_id": "acme-blog", "params": {"title": "x"}}, "admin_email"),
        ({"kind": "provision", "site_id": "acme-blog", "params": {**PROVISION, "admin_email": "nope"}}, "admin_email"),
        ({"kind": "provision", "site_id": "acme-blog", "params": {**PROVISION, "colour": "red"}}, "colour"),
        ({"kind": "provision", "site_id": "acme-blog", "params": {**PROVISION, "locale": "english"}}, "locale"),
        ({"kind": "provision", "site_id": "acme-blog", "principal": "bad principal"}, "as"),
        ({"kind": "provision", "site_id": "acme-blog", "idempotency_key": ""}, "idempotency_key"),
    ],
)
def test_invalid_submissions_name_the_field_and_write_nothing(harness: Harness, kwargs: dict, field: str) -> None:
    args = {"principal": "p", "params": PROVISION, **kwargs}
    with pytest.raises(InvalidInput) as refused:
        harness.submitter.submit(**args)
    assert refused.value.field == field
    assert _nothing_written(harness)


def test_oversized_input_is_refused_before_anything_is_written() -> None:
    harness = Harness(max_input_bytes=1024)
    with pytest.raises(InvalidInput, match="over the 1024-byte limit") as refused:
        harness.submitter.submit(
            kind="provision",
            site_id="acme-blog",
            principal="p",
            params={**PROVISION, "title": "x" * 200},
            raw_size=5000,
        )
    assert refused.value.field == "input"
    assert _nothing_written(harness)


@pytest.mark.parametrize(
    ("kind", "params", "field"),
    [
        ("import", {"source_key": "elsewhere/x.xml", "source_digest": "0" * 64, "source_bytes": 1}, "source_key"),
        (
            "import",
            {"source_key": f"uploads/{'a' * 24}/acme-blog/{'0' * 64}.xml", "source_digest": "xyz", "source_bytes": 1},
            "source_digest",
        ),
        ("publish", {"revision": "abc"}, "revision"),
        ("recover", {"mode": "restore"}, "revision_id"),
        ("recover", {"revision_id": "0" * 64, "mode": "undo"}, "mode"),
        ("wp_cron", {"due_minute": -1}, "due_minute"),
        ("wp_cron", {"due_minute": "5"}, "due_minute"),  # a string is not an integer, whatever it spells
        ("wp_cron", {"due_minute": 5.5}, "due_minute"),
        ("wp_cron", {"due_minute": True}, "due_minute"),
        (
            "import",
            {
                "source_key": f"uploads/{'a' * 24}/acme-blog/{'0' * 64}.xml",
                "source_digest": "0" * 64,
                "source_bytes": True,
            },
            "source_bytes",
        ),
    ],
)
def test_every_kind_validates_its_own_input(harness: Harness, kind: str, params: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        harness.submitter.submit(kind=kind, site_id="acme-blog", principal="p", params=params)
    assert refused.value.field == field
    assert _nothing_written(harness)


def test_an_integer_is_any_json_number_without_a_fraction(harness: Harness) -> None:
    # JSON Schema's `integer` (what the OpenAPI document states) includes 5.0: a client that sends it is valid.
    harness.registered("acme-blog", "p")
    result = harness.submitter.submit(kind="wp_cron", site_id="acme-blog", principal="p", params={"due_minute": 5.0})
    assert result.created and op_input(harness.world.blobs, result.operation) == b'{"due_minute":5}'


def test_imports_travel_in_the_bulk_lane(harness: Harness) -> None:
    from tests.unit.conftest import FIXTURES

    harness.registered("acme-blog", "p")
    harness.submitter.submit(
        kind="import",
        site_id="acme-blog",
        principal="p",
        params=harness.submitter.stage_upload("acme-blog", FIXTURES / "fixture-1.2.xml", "p"),
    )
    harness.submitter.submit(kind="publish", site_id="acme-blog", principal="p", params={})
    assert [m.lane for m in harness.world.queue.sent] == ["bulk", "operations"]


@pytest.mark.parametrize(
    ("arn", "principal"),
    [
        ("arn:aws:sts::123456789012:assumed-role/Producer/i-0abc", "arn:aws:sts::123456789012:assumed-role/Producer"),
        (
            "arn:aws:sts::123456789012:assumed-role/Producer/alice@example.com",
            "arn:aws:sts::123456789012:assumed-role/Producer",
        ),
        ("arn:aws:iam::123456789012:user/ci/deployer", "arn:aws:iam::123456789012:user/ci/deployer"),
        ("arn:aws-cn:sts::123456789012:assumed-role/Ops/s", "arn:aws-cn:sts::123456789012:assumed-role/Ops"),
    ],
)
def test_an_aws_caller_is_the_same_principal_in_every_session(arn: str, principal: str, harness: Harness) -> None:
    assert stable_identity(arn) == principal
    op_id = harness.submit(site="arn-site", principal=principal, key=arn)  # a valid principal for every store
    op = harness.world.operations.get(op_id)
    assert op is not None and op.principal == principal
