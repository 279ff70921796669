"""JSON API of notifications: ``/api/v1/channels`` (CRUD with the URL masked in every answer,
``POST …/{id}/test``, ``GET …/{id}/deliveries``) and ``/api/v1/routes`` (CRUD)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from app.access.middleware import require_team
from app.api_params import IdPath, IdQuery
from app.db import SessionDep, WriteSessionDep
from app.notify import service
from app.notify.models import NotifyRoute
from app.notify.schemas import (
    ChannelIn,
    ChannelOut,
    ChannelUpdate,
    DeliveryOut,
    RouteIn,
    RouteOut,
)
from app.notify.secrets import SecretBox

router = APIRouter(prefix="/api/v1", tags=["notifications"])


def _box(request: Request) -> SecretBox:
    box = getattr(request.app.state, "secret_box", None)
    if box is None:
        box = request.app.state.secret_box = SecretBox.from_settings(request.app.state.settings)
    return box


BoxDep = Annotated[SecretBox, Depends(_box)]


def _allow(request: Request) -> list[str]:
    return list(request.app.state.settings.notify_allow_hosts)


def route_out(route: NotifyRoute) -> RouteOut:
    """A stored route as the API shows it."""
    return RouteOut(
        id=route.id,
        channel_id=route.channel_id,
        team=route.team,
        severities=list(route.severities),
        group_by=list(route.group_by),
        group_wait_s=route.group_wait_s,
        repeat_interval_s=route.repeat_interval_s,
        created_at=route.created_at,
    )


@router.get("/channels", response_model=list[ChannelOut], summary="Notification channels")
def list_channels(
    session: SessionDep, box: BoxDep, team: Annotated[str | None, Query()] = None
) -> list[ChannelOut]:
    return [service.channel_out(c, box) for c in service.list_channels(session, team=team)]


@router.post("/channels", response_model=ChannelOut, status_code=201, summary="Add a channel")
def create_channel(
    request: Request, session: WriteSessionDep, box: BoxDep, data: ChannelIn
) -> ChannelOut:
    require_team(request, data.team)
    channel = service.create_channel(session, data=data, box=box, allow_hosts=_allow(request))
    return service.channel_out(channel, box)


@router.get("/channels/{channel_id}", response_model=ChannelOut, summary="One channel")
def get_channel(session: SessionDep, box: BoxDep, channel_id: IdPath) -> ChannelOut:
    return service.channel_out(service.get_channel(session, channel_id=channel_id), box)


@router.patch("/channels/{channel_id}", response_model=ChannelOut, summary="Change a channel")
def update_channel(
    request: Request, session: WriteSessionDep, box: BoxDep, channel_id: IdPath, data: ChannelUpdate
) -> ChannelOut:
    if "team" in data.model_fields_set:
        require_team(request, data.team)
    channel = service.update_channel(
        session, channel_id=channel_id, data=data, box=box, allow_hosts=_allow(request)
    )
    return service.channel_out(channel, box)


@router.delete("/channels/{channel_id}", status_code=204, summary="Delete a channel")
def delete_channel(session: WriteSessionDep, channel_id: IdPath) -> Response:
    service.delete_channel(session, channel_id=channel_id)
    return Response(status_code=204)


@router.post(
    "/channels/{channel_id}/test",
    response_model=DeliveryOut,
    status_code=202,
    summary="Send a test message",
)
def send_test(session: WriteSessionDep, channel_id: IdPath) -> DeliveryOut:
    """Queues the test message; its row in ``…/deliveries`` shows the outcome within a
    second or two (the worker's next tick)."""
    return service.delivery_out(service.send_test(session, channel_id=channel_id))


@router.get(
    "/channels/{channel_id}/deliveries",
    response_model=list[DeliveryOut],
    summary="A channel's delivery log",
)
def deliveries(
    session: SessionDep,
    channel_id: IdPath,
    status: Annotated[
        Literal["queued", "delivered", "failed", "suppressed"] | None, Query()
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[DeliveryOut]:
    rows = service.list_deliveries(session, channel_id=channel_id, status=status, limit=limit)
    return [service.delivery_out(r) for r in rows]


@router.get("/routes", response_model=list[RouteOut], summary="Notification routes")
def list_routes(session: SessionDep, channel_id: IdQuery = None) -> list[RouteOut]:
    return [route_out(r) for r in service.list_routes(session, channel_id=channel_id)]


@router.post("/routes", response_model=RouteOut, status_code=201, summary="Add a route")
def create_route(request: Request, session: WriteSessionDep, data: RouteIn) -> RouteOut:
    require_team(request, data.team)
    return route_out(service.create_route(session, data=data))


@router.get("/routes/{route_id}", response_model=RouteOut, summary="One route")
def get_route(session: SessionDep, route_id: IdPath) -> RouteOut:
    return route_out(service.get_route(session, route_id=route_id))


@router.put("/routes/{route_id}", response_model=RouteOut, summary="Replace a route")
def replace_route(
    request: Request, session: WriteSessionDep, route_id: IdPath, data: RouteIn
) -> RouteOut:
    require_team(request, data.team)
    return route_out(service.replace_route(session, route_id=route_id, data=data))


@router.delete("/routes/{route_id}", status_code=204, summary="Delete a route")
def delete_route(session: WriteSessionDep, route_id: IdPath) -> Response:
    service.delete_route(session, route_id=route_id)
    return Response(status_code=204)
