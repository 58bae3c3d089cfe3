"""S3 blob store: immutable objects written with If-None-Match, so a rewrite can never replace content."""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Callable
from functools import cached_property
from typing import IO, Any

from botocore.exceptions import ClientError

from sitedispatch.aws.conflicts import Conflicted, retried_on_conflict
from sitedispatch.domain.errors import InvalidInput, NotFound
from sitedispatch.domain.ports import SignedUpload, StoredObject

CONDITIONAL_CONFLICT = "ConditionalRequestConflict"  # S3's 409: retry (aws/conflicts.py)


def sha256_b64(hex_digest: str) -> str:
    """S3's spelling of a SHA-256 (base64 of the 32 bytes)."""
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


class S3BlobStore:
    """`client` builds the S3 client on the first object read or written: an attempt claims its operation before
    it touches S3, and building a client is a noticeable part of a cold environment's CPU."""

    def __init__(self, client: Callable[[], Any], bucket: str) -> None:
        self._build_client = client
        self.bucket = bucket

    @cached_property
    def client(self) -> Any:
        return self._build_client()

    def put_if_absent(
        self, key: str, body: bytes | IO[bytes], content_type: str = "application/json", sha256: str | None = None
    ) -> bool:
        checksum = {"ChecksumAlgorithm": "SHA256", "ChecksumSHA256": sha256_b64(sha256)} if sha256 else {}
        start = body.tell() if not isinstance(body, bytes) else 0

        def put() -> bool:
            if not isinstance(body, bytes):
                body.seek(start)  # a request sent again sends the whole body again
            return self._put_conditionally(key, Body=body, ContentType=content_type, IfNoneMatch="*", **checksum)

        return retried_on_conflict(put, f"s3://{self.bucket}/{key}", "s3_conflict")

    def _put_conditionally(self, key: str, **params: Any) -> bool:
        """One conditional PUT: True if written, False if its condition failed (412). S3's 409 (another conditional
        write of the key was in progress, nothing written) becomes Conflicted, which `retried_on_conflict` sends
        again: then the other write is there (412) or gone. A body that is not its declared SHA-256 is refused."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, **params)
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "PreconditionFailed":
                return False
            if code == CONDITIONAL_CONFLICT:
                raise Conflicted(exc) from exc
            if code == "BadDigest":
                refused = f"s3://{self.bucket}/{key}: the body is not the declared SHA-256"
                raise InvalidInput(refused, field="sha256") from None
            raise

    def read_versioned(self, key: str) -> tuple[bytes, str] | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise
        return response["Body"].read(), str(response["ETag"])

    def replace(self, key: str, body: bytes, expected_etag: str | None, content_type: str = "application/json") -> bool:
        condition = {"IfMatch": expected_etag} if expected_etag else {"IfNoneMatch": "*"}
        return retried_on_conflict(
            lambda: self._put_conditionally(key, Body=body, ContentType=content_type, **condition),
            f"s3://{self.bucket}/{key}",
            "s3_conflict",
        )

    def get(self, key: str) -> bytes:
        return self.open(key).read()

    def open(self, key: str, start: int = 0, end: int | None = None) -> IO[bytes]:
        ranged = {} if start == 0 and end is None else {"Range": f"bytes={start}-{'' if end is None else end - 1}"}
        if end is not None and end <= start:
            return io.BytesIO(b"")  # an empty range (S3 would refuse it as unsatisfiable)
        try:
            body: IO[bytes] = self.client.get_object(Bucket=self.bucket, Key=key, **ranged)["Body"]
            return body
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise NotFound(f"s3://{self.bucket}/{key}") from exc
            raise

    def describe(self, key: str) -> StoredObject | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404", "NotFound"}:
                return None
            raise
        checksum = head.get("ChecksumSHA256")
        return StoredObject(int(head["ContentLength"]), base64.b64decode(checksum).hex() if checksum else None)


class S3UploadSigner:
    """Presigned PUTs (SigV4) of the API's upload grants. The checksum headers are signed, so the holder cannot drop
    them, and S3 refuses a body whose SHA-256 is not the declared one (BadDigest)."""

    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def presign_put(self, key: str, size: int, sha256: str, content_type: str, expires_s: int) -> SignedUpload:
        checksum = sha256_b64(sha256)
        url = self.client.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ContentType": content_type,
                "ContentLength": size,
                "ChecksumAlgorithm": "SHA256",
                "ChecksumSHA256": checksum,
            },
            ExpiresIn=expires_s,
        )
        headers = {
            "Content-Type": content_type,
            "Content-Length": str(size),
            "x-amz-checksum-sha256": checksum,
            "x-amz-sdk-checksum-algorithm": "SHA256",
        }
        return SignedUpload(str(url), "PUT", headers, time.time() + expires_s)
