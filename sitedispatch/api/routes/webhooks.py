"""Webhooks: a caller's endpoints, their secrets and deliveries. Each endpoint is its caller's alone."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import Field

from sitedispatch.api.errors import ERRORS, answering
from sitedispatch.api.models import (
    NUMBER,
    AttemptBody,
    DeliveryBody,
    DeliveryPage,
    RedeliverRequest,
    SecretRotated,
    WebhookBody,
    WebhookCreated,
    WebhookList,
    WebhookRequest,
)
from sitedispatch.api.request import caller, dependencies
from sitedispatch.domain.errors import InvalidInput
from sitedispatch.domain.events import EventType

router = Router()
MAX_PAGE = 100


def _types(names: list[str]) -> list[EventType]:
    try:
        return [EventType(name) for name in names]
    except ValueError:
        known = ", ".join(t.value for t in EventType)
        raise InvalidInput(f"types: each is one of {known}", field="types") from None


@router.post(
    "/webhooks",
    responses=answering(201, "registered (Location names it); its secret is shown this once"),
    summary="Register an endpoint: each of the caller's events is POSTed to it",
)
def register(body: WebhookRequest) -> Response[WebhookCreated]:
    endpoint, secret = (
        dependencies().endpoints().register(caller(), body.url, _types(body.types), body.tenant, body.description)
    )
    created = WebhookCreated(endpoint=WebhookBody.of(endpoint), secret=secret)
    return Response(
        201,
        content_types.APPLICATION_JSON,
        created,
        headers={"Location": f"/webhooks/{endpoint.endpoint_id}"},
    )


@router.get("/webhooks", responses=ERRORS, summary="The caller's endpoints")
def owned() -> WebhookList:
    return WebhookList(endpoints=[WebhookBody.of(e) for e in dependencies().endpoints().owned(caller())])


@router.get("/webhooks/<endpoint_id>", responses=ERRORS, summary="One of the caller's endpoints")
def get(endpoint_id: str) -> WebhookBody:
    return WebhookBody.of(dependencies().endpoints().get(caller(), endpoint_id))


@router.delete(
    "/webhooks/<endpoint_id>", responses=ERRORS, summary="Delete an endpoint, its secret and deliveries: it as it was"
)
def delete(endpoint_id: str) -> WebhookBody:
    return WebhookBody.of(dependencies().endpoints().delete(caller(), endpoint_id))


@router.post(
    "/webhooks/<endpoint_id>/rotate",
    responses=ERRORS,
    summary="A new signing secret; for 24 h each delivery carries both signatures",
)
def rotate(endpoint_id: str) -> SecretRotated:
    secret, until = dependencies().endpoints().rotate(caller(), endpoint_id)
    return SecretRotated(secret=secret, previous_valid_until=until)


@router.post(
    "/webhooks/<endpoint_id>/enable",
    responses=ERRORS,
    summary="Enable a disabled endpoint: it goes on from where it stopped",
)
def enable(endpoint_id: str) -> WebhookBody:
    return WebhookBody.of(dependencies().endpoints().enable(caller(), endpoint_id))


@router.post(
    "/webhooks/<endpoint_id>/redeliver",
    responses=ERRORS,
    summary="Send the events of a range of feed places again (those the endpoint wants)",
)
def redeliver(endpoint_id: str, body: RedeliverRequest) -> WebhookBody:
    endpoint = dependencies().endpoints().redeliver(caller(), endpoint_id, body.from_seq, body.count)
    return WebhookBody.of(endpoint)


@router.get(
    "/webhooks/<endpoint_id>/deliveries",
    responses=ERRORS,
    summary="The endpoint's deliveries with their attempts, newest first",
)
def deliveries(
    endpoint_id: str,
    before: Annotated[int | None, Field(ge=1), Query(description="only places before this one"), NUMBER] = None,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE), Query(), NUMBER] = 20,
) -> DeliveryPage:
    found = dependencies().endpoints().deliveries(caller(), endpoint_id, before, limit)
    return DeliveryPage(
        deliveries=[
            DeliveryBody(
                seq=d.seq,
                event_id=d.event_id,
                type=d.type,
                delivered=d.delivered,
                attempts=[AttemptBody(**asdict(a)) for a in d.attempts],
            )
            for d in found
        ],
        before=found[-1].seq if len(found) == limit else None,
    )
