"""Secrets Manager: the one call the WordPress driver needs, with AWS errors mapped to domain errors."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from sitedispatch.domain.errors import PermanentError, TransientError

MISSING = {"ResourceNotFoundException", "DecryptionFailure", "AccessDeniedException", "InvalidRequestException"}


def secret_reader(client: Any) -> Any:
    def secret_string(secret_id: str) -> str:
        try:
            return str(client.get_secret_value(SecretId=secret_id)["SecretString"])
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in MISSING:
                raise PermanentError(
                    f"credential secret {secret_id} cannot be read: {code}", code="credential_missing"
                ) from None
            raise TransientError(f"credential secret {secret_id}: {code}", code="credential_unavailable") from None

    return secret_string
