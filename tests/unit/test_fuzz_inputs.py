"""Bad input, fuzzed: every submit either is accepted (and its stored input loads back) or is refused with a clear,
field-naming error; nothing else escapes. Queue messages of any shape never crash the worker."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sitedispatch.domain.delivery import Outcome
from sitedispatch.domain.errors import IdempotencyConflict, InvalidInput, NotFound
from sitedispatch.domain.model import Kind, QueueMessage
from sitedispatch.domain.schemas import load_input
from sitedispatch.operations.worker import op_input
from tests.conftest import examples
from tests.factories import PROVISION
from tests.fakes import RecordingVisibility
from tests.unit.conftest import Harness

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
known_fields = st.sampled_from(
    [
        "title",
        "admin_email",
        "admin_login",
        "url",
        "locale",
        "timezone",
        "due_minute",
        "revision_id",
        "mode",
        "source_key",
        "source_digest",
        "source_bytes",
        "extra",
    ]
)
params_strategy = st.one_of(
    st.dictionaries(known_fields, json_values, max_size=6),
    st.fixed_dictionaries({k: st.just(v) for k, v in PROVISION.items()}),
    st.dictionaries(st.text(max_size=12), json_values, max_size=4),
)
kinds = st.one_of(st.sampled_from([k.value for k in Kind]), st.text(max_size=12))
site_ids = st.one_of(st.sampled_from(["acme-blog", "site-two"]), st.text(max_size=70))
principals = st.one_of(st.just("tenant-a"), st.text(max_size=70))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=kinds,
    site=site_ids,
    principal=principals,
    params=params_strategy,
    key=st.one_of(st.none(), st.text(max_size=300)),
)
def test_a_submit_is_accepted_or_refused_with_a_field_naming_error(
    kind: str, site: str, principal: str, params: dict[str, Any], key: str | None
) -> None:
    harness = Harness()
    try:
        result = harness.submitter.submit(
            kind=kind, site_id=site, principal=principal, params=params, idempotency_key=key
        )
    except InvalidInput as refused:
        assert refused.field, f"a refusal names its field: {refused}"
        assert str(refused)
        return
    except IdempotencyConflict:
        return
    except NotFound:  # work other than a provision for a site never registered
        assert kind != "provision"
        return
    op = result.operation
    stored = op_input(harness.world.blobs, op)
    assert load_input(op.kind, stored).canonical_bytes() == stored  # the stored input is valid and canonical
    assert len(stored) <= harness.settings.max_input_bytes


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operation_id=st.text(max_size=80), site_id=st.text(max_size=80))
def test_a_message_naming_anything_is_acknowledged_or_handled_never_a_crash(operation_id: str, site_id: str) -> None:
    harness = Harness()
    real = harness.submit()
    candidates = [
        QueueMessage(operation_id, site_id),
        QueueMessage(real, site_id),
        QueueMessage(operation_id, "acme-blog"),
    ]
    for message in candidates:
        result = harness.worker().process(message, RecordingVisibility())
        if message.operation_id != real or message.site_id != "acme-blog":
            assert result.outcome == Outcome.ACKED and result.reason in {"unknown_operation", "site_mismatch"}
    assert harness.world.db.commits == {}  # none of these did any work


def test_message_bodies_of_every_bad_shape_are_dropped_by_the_entrypoint_parser() -> None:
    from sitedispatch.functions.operations_worker import parse_message

    bad = [
        "not json",
        "",
        "{}",
        "[]",
        "null",
        "42",
        json.dumps({"operation_id": "op_x"}),
        json.dumps({"site_id": "acme-blog"}),
        json.dumps({"operation_id": None, "site_id": []}),
        json.dumps({"operation_id": "", "site_id": "acme-blog"}),
        json.dumps({"operation_id": "op_x", "site_id": "acme-blog", "principal": 7}),
        "{" * 10_000,
        "x" * 300_000,
    ]
    for body in bad:
        assert parse_message(body) is None, body[:40]
    good = QueueMessage("op_x", "acme-blog", "p", "operations", "t")
    assert parse_message(good.to_body()) == good
