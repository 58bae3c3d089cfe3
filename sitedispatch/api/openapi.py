"""`python -m sitedispatch.api.openapi [events]`: the API's OpenAPI document (what `make openapi` writes to
openapi.json), or the events' JSON Schema (events.schema.json, beside it)."""

from __future__ import annotations

import json
import sys

from sitedispatch.api.app import openapi_document
from sitedispatch.api.models import EventBody
from sitedispatch.domain.events import EVENT_SCHEMA_VERSION

EVENT_SCHEMA_ID = f"urn:sitedispatch:event:v{EVENT_SCHEMA_VERSION}"


def render() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def render_event_schema() -> str:
    """Every event's JSON Schema (draft 2020-12): the body on the bus (`detail`), in the feed and of a webhook."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": EVENT_SCHEMA_ID,
        **EventBody.model_json_schema(),
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render_event_schema() if sys.argv[1:] == ["events"] else render(), end="")
