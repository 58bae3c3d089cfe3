"""Uploads: a presigned PUT of one file for an import, bound to the caller, the site and the file's digest."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.api_gateway import Router

from sitedispatch.api.errors import ERRORS
from sitedispatch.api.models import UploadRequest
from sitedispatch.api.request import caller, dependencies
from sitedispatch.operations.uploads import UploadGrant, grant_upload

router = Router()


@router.post(
    "/uploads",
    responses=ERRORS,
    summary="A presigned upload of one file for an import, bound to the caller and its digest",
)
def upload(body: UploadRequest) -> UploadGrant:
    d, who = dependencies(), caller()
    return grant_upload(
        d.blobs, d.upload_signer, d.settings.max_upload_bytes, who.identity, body.site_id, body.sha256, body.bytes
    )
