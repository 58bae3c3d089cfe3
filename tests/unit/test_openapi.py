"""The committed openapi.json is the one the API generates, and a valid OpenAPI 3.1 document."""

from __future__ import annotations

import json
from pathlib import Path

from openapi_spec_validator import validate

from sitedispatch.api.app import OPERATOR_ROUTES, routes
from sitedispatch.api.openapi import render, render_event_schema

COMMITTED = Path(__file__).resolve().parents[2] / "openapi.json"
EVENT_SCHEMA = COMMITTED.with_name("events.schema.json")


def test_the_committed_document_is_the_generated_one() -> None:
    assert COMMITTED.read_text() == render(), "openapi.json is stale: run `make openapi` and commit it"
    assert EVENT_SCHEMA.read_text() == render_event_schema(), "events.schema.json is stale: run `make openapi`"


def test_the_document_is_valid_openapi() -> None:
    document = json.loads(COMMITTED.read_text())
    validate(document)  # raises on the first violation of the OpenAPI 3.1 schema
    assert document["openapi"].startswith("3.1")


def test_every_route_is_described_with_its_models() -> None:
    document = json.loads(COMMITTED.read_text())
    assert len(routes(document)) == 42 and set(routes(document)) >= OPERATOR_ROUTES
    register = document["paths"]["/webhooks"]["post"]
    assert "WebhookCreated" in json.dumps(register["responses"]["201"]) and "200" not in register["responses"]
    types = document["components"]["schemas"]["WebhookRequest"]["properties"]["types"]
    assert set(types["items"]["enum"]) >= {"operation.succeeded", "webhook.disabled"}
    submit = document["paths"]["/operations"]["post"]
    assert {(p["name"].lower(), p["in"]) for p in submit["parameters"]} == {("idempotency-key", "header")}
    assert "SubmitRequest" in json.dumps(submit["requestBody"]) and "202" in submit["responses"]
    schemas = document["components"]["schemas"]
    assert {"SubmitRequest", "Operation", "Site", "StatusReport", "UploadGrant", "RedriveReport"} <= set(schemas)
