"""S3 blob store: immutable objects written with If-None-Match, so a rewrite can never replace content."""

from __future__ import annotations

from typing import IO, Any

from botocore.exceptions import ClientError

from sitedispatch.domain.errors import NotFound, TransientError


class S3BlobStore:
    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def put_if_absent(self, key: str, body: bytes | IO[bytes], content_type: str = "application/json") -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "PreconditionFailed":
                return False
            if code == "ConditionalRequestConflict":
                # Two writers raced on the same key; S3 says retry. Content-addressed keys make the retry a no-op.
                raise TransientError(
                    f"s3://{self.bucket}/{key}: concurrent conditional write", code="s3_conflict"
                ) from exc
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
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, **condition)
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"PreconditionFailed", "ConditionalRequestConflict"}:
                return False
            raise

    def get(self, key: str) -> bytes:
        return self.open(key).read()

    def open(self, key: str) -> IO[bytes]:
        try:
            body: IO[bytes] = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            return body
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise NotFound(f"s3://{self.bucket}/{key}") from exc
            raise
