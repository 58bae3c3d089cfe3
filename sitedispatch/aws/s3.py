"""S3 blob store: immutable objects written with If-None-Match, so a rewrite can never replace content."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ..errors import NotFound, TransientError


class S3BlobStore:
    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def put_if_absent(self, key: str, body: bytes, content_type: str = "application/json") -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "PreconditionFailed":
                return False
            if code == "ConditionalRequestConflict":
                # Two writers raced on the same key; S3 says retry. Content-addressed keys make the retry a no-op.
                raise TransientError(f"s3://{self.bucket}/{key}: concurrent conditional write",
                                     code="s3_conflict") from exc
            raise

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                raise NotFound(f"s3://{self.bucket}/{key}") from exc
            raise
