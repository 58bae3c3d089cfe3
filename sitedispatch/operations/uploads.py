"""Uploads: a file an import names is staged by its producer under a key bound to the producer, the site and the
file's SHA-256, and the core accepts it only if the stored object is exactly that (S3 checked the digest on PUT)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sitedispatch.domain.errors import Conflict, InvalidInput, NotFound
from sitedispatch.domain.model import SITE_ID_PATTERN
from sitedispatch.domain.ports import BlobStore, SignedUpload, UploadSigner

UPLOAD_CONTENT_TYPE = "application/xml"
UPLOAD_GRANT_S = 900  # a grant's URL works for 15 minutes


READ_CHUNK = 1 << 20  # files are hashed a megabyte at a time, never read whole


def file_digest(path: Path) -> tuple[int, str]:
    """(size, hex SHA-256) of a file to upload, streamed; a file that cannot be read is InvalidInput."""
    try:
        size = path.stat().st_size
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            while chunk := fh.read(READ_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}", field="input-file") from None
    return size, digest.hexdigest()


def owner_slug(principal: str) -> str:
    """A principal as one path segment (an IAM ARN holds `/` and `:`)."""
    return hashlib.sha256(principal.encode()).hexdigest()[:24]


def upload_key(principal: str, site_id: str, digest: str) -> str:
    return f"uploads/{owner_slug(principal)}/{site_id}/{digest}.xml"


def import_params(key: str, digest: str, size: int) -> dict[str, Any]:
    """The input of an import that names a staged upload."""
    return {"source_key": key, "source_digest": digest, "source_bytes": size}


@dataclass(frozen=True)
class UploadGrant:
    site_id: str
    key: str
    sha256: str
    bytes: int
    present: bool  # the same file was uploaded before: nothing to send
    upload: SignedUpload | None  # where to PUT it (None when present)
    import_params: dict[str, Any]  # the params of `submit import` once it is uploaded


def grant_upload(
    blobs: BlobStore, signer: UploadSigner, max_bytes: int, principal: str, site_id: str, sha256: str, size: int
) -> UploadGrant:
    if not SITE_ID_PATTERN.fullmatch(site_id):
        raise InvalidInput(f"site id {site_id!r} must match {SITE_ID_PATTERN.pattern}", field="site_id")
    if size > max_bytes:
        raise InvalidInput(f"the file is {size} bytes, over the {max_bytes}-byte upload limit", field="bytes")
    key = upload_key(principal, site_id, sha256)
    stored = blobs.describe(key)
    present = stored is not None and stored.size == size and stored.sha256 == sha256
    signed = None if present else signer.presign_put(key, size, sha256, UPLOAD_CONTENT_TYPE, UPLOAD_GRANT_S)
    return UploadGrant(site_id, key, sha256, size, present, signed, import_params(key, sha256, size))


def check_upload(blobs: BlobStore, principal: str, site_id: str, params: dict[str, Any]) -> None:
    """Refuse an import whose file is not the caller's upload for this site (404, as anything of another's), or not
    (yet) the declared file (409: the upload's state, not the request's form, is what is wrong)."""
    key, digest, size = params["source_key"], params["source_digest"], params["source_bytes"]
    if key != upload_key(principal, site_id, digest):
        raise NotFound("source_key is not an upload of yours for this site (ask POST /uploads for one)")
    stored = blobs.describe(key)
    if stored is None:
        raise Conflict(f"nothing uploaded at {key} yet: PUT the file to the upload URL first")
    if stored.size != size or stored.sha256 != digest:
        raise Conflict(
            f"the upload at {key} is {stored.size} bytes with digest {(stored.sha256 or 'unknown')[:12]}…, "
            f"not the declared {size} bytes with digest {digest[:12]}…"
        )
