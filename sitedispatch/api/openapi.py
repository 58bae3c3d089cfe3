"""`python -m sitedispatch.api.openapi`: the API's OpenAPI document (what `make openapi` writes to openapi.json)."""

from __future__ import annotations

import json

from sitedispatch.api.app import openapi_document


def render() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
