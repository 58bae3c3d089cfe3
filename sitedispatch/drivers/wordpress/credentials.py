"""Site credentials by reference: `file:///path.json` locally, a Secrets Manager secret (ARN or `secretsmanager:NAME`)
on AWS. The document is {"user": ..., "application_password": ...}. Only the reference travels in messages and rows;
the secret is read by the worker that needs it and cached for a few minutes per process."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sitedispatch.domain.errors import InvalidInput, PermanentError
from sitedispatch.domain.resources import SECRET_NAME_PREFIX
from sitedispatch.drivers.wordpress.origin import Credential

CACHE_S = 300.0
SECRETS_PREFIX = "secretsmanager:"
SECRET_ARN_PREFIX = "arn:aws:secretsmanager:"
FILE_PREFIX = "file://"


# What a credential reference may be: a file, or a Secrets Manager secret the workers may read (by name or ARN).
# `[\s\S]` where "anything" is meant: an ECMA pattern (the OpenAPI document) and Python's agree on it.
CREDENTIAL_PATTERN = re.compile(
    rf"^({re.escape(FILE_PREFIX)}/[\s\S]*"
    rf"|{re.escape(SECRETS_PREFIX + SECRET_NAME_PREFIX)}[\s\S]+"
    rf"|{re.escape(SECRET_ARN_PREFIX)}[\s\S]*:secret:{re.escape(SECRET_NAME_PREFIX)}[\s\S]*)$"
)


def check_reference(ref: str) -> str:
    """A credential reference as users give it (validated at registration, before anything is stored)."""
    if CREDENTIAL_PATTERN.fullmatch(ref):
        return ref
    raise InvalidInput(
        f"credential reference must be file:///absolute/path.json, or a Secrets Manager secret named "
        f"{SECRET_NAME_PREFIX}... (its ARN, or secretsmanager:{SECRET_NAME_PREFIX}NAME: the workers may "
        f"read only those), not {ref[:40]!r}",
        field="credential",
    )


class Credentials:
    """Resolves references; `secret_string(secret_id)` reads Secrets Manager (absent: only file references)."""

    def __init__(
        self, secret_string: Callable[[str], str] | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.secret_string = secret_string
        self.clock = clock
        self._cache: dict[str, tuple[float, Credential]] = {}
        self._lock = threading.Lock()

    def get(self, ref: str) -> Credential:
        with self._lock:
            cached = self._cache.get(ref)
            if cached is not None and self.clock() - cached[0] < CACHE_S:
                return cached[1]
        credential = _parse(ref, self._read(check_reference(ref)))
        with self._lock:
            self._cache[ref] = (self.clock(), credential)
        return credential

    def _read(self, ref: str) -> str:
        if ref.startswith(FILE_PREFIX):
            try:
                return Path(ref[len(FILE_PREFIX) :]).read_text()
            except OSError as exc:
                raise PermanentError(
                    f"credential {ref} cannot be read: {exc.strerror}", code="credential_missing"
                ) from None
        if self.secret_string is None:
            raise PermanentError(
                f"credential {ref} is a Secrets Manager secret, which this process cannot read",
                code="credential_missing",
            )
        return self.secret_string(ref.removeprefix(SECRETS_PREFIX))


def _parse(ref: str, text: str) -> Credential:
    try:
        document = json.loads(text)
        return Credential(str(document["user"]), str(document["application_password"]))
    except (ValueError, KeyError, TypeError):
        raise PermanentError(
            f"credential {ref} is not a JSON object with user and application_password", code="credential_invalid"
        ) from None
