"""Per-kind input schemas. Validation happens at submit, before anything is written."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.model import NOT_BLANK_PATTERN, Kind


def _integral(value: Any) -> Any:
    """JSON has one number type, and JSON Schema's `integer` is any number with no fraction: 463.0 is 463."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# The last mark of a strict model's integer field, `Annotated[int, Field(ge=0), INTEGRAL]`: a JSON number without a
# fraction is taken, `true` or `"5"` is refused. Last, so the field's bounds still reach the JSON Schema.
INTEGRAL = BeforeValidator(_integral)


class OperationInput(BaseModel):
    # Strings are taken as sent (no stripping): what the OpenAPI document states of a field is what is checked.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)  # of the type the document states

    def canonical_bytes(self) -> bytes:
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()


class ProvisionInput(OperationInput):
    title: str = Field(min_length=1, max_length=200, pattern=NOT_BLANK_PATTERN.pattern, description="not blank")
    admin_email: str = Field(pattern=r"^[!-?A-~]+@[!-?A-~]+\.[!-?A-~]+$", max_length=254)  # visible ASCII, one @
    admin_login: str = Field(default="admin", pattern=r"^[a-z0-9_.@-]{1,60}$")
    url: str | None = Field(default=None, pattern=r"^https?://[!-.0-~]+(/[!-~]*)?$", max_length=2048)
    locale: str = Field(default="en_US", pattern=r"^[a-z]{2,3}(_[A-Z]{2})?$")
    timezone: str = Field(default="UTC", max_length=64)


DIGEST = r"^[0-9a-f]{64}$"


class ImportInput(OperationInput):
    """A WXR file its producer uploaded (POST /uploads, then PUT): the message never carries it."""

    source_key: str = Field(pattern=r"^uploads/[0-9a-f]{24}/[a-z0-9][a-z0-9-]{2,62}/[0-9a-f]{64}\.xml$")
    source_digest: str = Field(pattern=DIGEST)
    source_bytes: Annotated[int, Field(ge=0), INTEGRAL]


class PublishInput(OperationInput):
    """Publish the site's head revision (no fields)."""


class WpCronInput(OperationInput):
    """Run due events as of `due_minute` (epoch minutes; default: the operation's acceptance time)."""

    due_minute: Annotated[int, Field(ge=0), INTEGRAL] | None = None


class RecoverInput(OperationInput):
    """rollback: make `revision_id` live again (head unchanged); restore: head content = `revision_id`."""

    revision_id: str = Field(pattern=DIGEST)
    mode: Literal["rollback", "restore"] = "rollback"


SCHEMAS: dict[Kind, type[OperationInput]] = {
    Kind.PROVISION: ProvisionInput,
    Kind.IMPORT: ImportInput,
    Kind.PUBLISH: PublishInput,
    Kind.WP_CRON: WpCronInput,
    Kind.RECOVER: RecoverInput,
}


def parse_input(kind: Kind, raw: dict[str, Any]) -> OperationInput:
    """Validate `raw` against the kind's schema; InvalidInput names the first bad field."""
    schema = SCHEMAS.get(kind)
    if schema is None:
        raise InvalidInput(
            f"kind {kind.value!r} has no handler in this release; available: {', '.join(k.value for k in SCHEMAS)}",
            field="kind",
        )
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "input"
        missing = [".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "missing"]
        if len(missing) > 1:  # every field it lacks, in one answer (not one per try)
            raise InvalidInput(f"{kind.value} needs {', '.join(missing)}: Field required", field=missing[0]) from exc
        raise InvalidInput(f"{where}: {first['msg']}", field=where) from exc


def load_input(kind: Kind, data: bytes) -> OperationInput:
    """Rebuild a stored input blob (already validated at submit)."""
    return SCHEMAS[kind].model_validate_json(data)
