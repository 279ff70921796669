"""Notification pages: ``/notifications`` (channels and routes per team), the channel forms
(create per kind, edit, enable/disable, delete with confirmation) and "send test message"
(htmx: the result shown inline). Every change is a POST answered by a redirect; the write
session commits before the response is sent. No page ever holds a webhook URL or secret: the
channel's URL shows as ``scheme://host/…`` and the edit form leaves URL and secret empty.

The delivery log lives in :mod:`app.notify.ui_deliveries`, routes in
:mod:`app.notify.ui_routes`; both are included here so ``app.main`` registers one router."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.access.middleware import require_team
from app.alerts.page_views import parse_id
from app.db import SessionDep, WriteSessionDep
from app.errors import BadRequest, Conflict
from app.notify import service, ui_deliveries, ui_routes
from app.notify.schemas import ChannelOut, ChannelUpdate
from app.notify.ui_common import FormDep, allow_hosts, box_of, see_other
from app.notify.ui_forms import (
    KIND_FORMS,
    OPTION_CHOICES,
    ChannelForm,
    channel_in,
    channel_update,
    error_key,
)
from app.web import is_htmx, render

router = APIRouter(include_in_schema=False)

NO_TEAM = "All teams"


def _teams(channels: list[ChannelOut]) -> list[tuple[str, list[ChannelOut]]]:
    """Channels grouped by team, team-less ones first ("All teams"), then teams by name."""
    groups: dict[str | None, list[ChannelOut]] = {}
    for c in channels:
        groups.setdefault(c.team, []).append(c)
    order = sorted(groups, key=lambda t: (t is not None, t or ""))
    return [(t or NO_TEAM, groups[t]) for t in order]


@router.get("/notifications", response_class=HTMLResponse)
def notifications_page(request: Request, session: SessionDep) -> HTMLResponse:
    """Channels per team (masked URL, enabled, broken with its last error, last delivery) and
    routes per team."""
    box = box_of(request)
    channels = [service.channel_out(c, box) for c in service.list_channels(session)]
    names = {c.id: c.name for c in channels}
    return render(
        request,
        "notify/channels.html",
        {
            "nav": "notifications",
            "teams": _teams(channels),
            "latest": service.latest_deliveries(session),
            "routes": ui_routes.routes_by_team(service.list_routes(session)),
            "channel_names": names,
            "kinds": KIND_FORMS,
        },
    )


def _form_page(
    request: Request,
    form: ChannelForm,
    *,
    channel: ChannelOut | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    return render(
        request,
        "notify/channel_form.html",
        {
            "nav": "notifications",
            "form": form,
            "spec": KIND_FORMS[form.kind],
            "channel": channel,
            "kinds": KIND_FORMS,
            "choices": OPTION_CHOICES,
        },
        status_code,
    )


@router.get("/notifications/channels/new", response_class=HTMLResponse)
def new_channel(request: Request, kind: str = "webhook", team: str = "") -> HTMLResponse:
    """The create form of one kind (``?kind=``, 400 naming ``kind`` when unknown)."""
    if kind not in KIND_FORMS:
        allowed = ", ".join(KIND_FORMS)
        raise BadRequest(f"kind: unknown channel kind {kind[:40]!r}; one of {allowed}")
    return _form_page(request, ChannelForm(kind, {"team": team[:128]}))


@router.post("/notifications/channels", response_model=None)
def create_channel(
    request: Request, session: WriteSessionDep, form: FormDep
) -> HTMLResponse | RedirectResponse:
    """Create a channel; errors are shown next to their field (400/409/422)."""
    data, shown = channel_in(form)
    if shown.kind not in KIND_FORMS:
        shown.errors["kind"] = f"kind: unknown channel kind {shown.kind[:40]!r}"
        shown.kind = "webhook"
    if data is None or shown.errors:
        return _form_page(request, shown, status_code=422)
    require_team(request, data.team)
    try:
        channel = service.create_channel(
            session, data=data, box=box_of(request), allow_hosts=allow_hosts(request)
        )
    except (BadRequest, Conflict) as exc:
        key, message = error_key(exc.detail)
        shown.errors[key] = message
        return _form_page(request, shown, status_code=exc.status_code)
    return see_other(request, f"/notifications#channel-{channel.id}")


def _typed(channel: ChannelOut) -> dict[str, str]:
    typed = {"name": channel.name, "team": channel.team or ""}
    typed.update({f"opt_{k}": v for k, v in channel.options.items()})
    return typed


@router.get("/notifications/channels/{channel_id}/edit", response_class=HTMLResponse)
def edit_channel(request: Request, session: SessionDep, channel_id: str) -> HTMLResponse:
    """The edit form: URL and secret empty ("unchanged unless filled")."""
    cid = parse_id(channel_id, "channel id")
    channel = service.channel_out(service.get_channel(session, channel_id=cid), box_of(request))
    return _form_page(request, ChannelForm(channel.kind, _typed(channel)), channel=channel)


@router.post("/notifications/channels/{channel_id}/edit", response_model=None)
def update_channel(
    request: Request, session: WriteSessionDep, channel_id: str, form: FormDep
) -> HTMLResponse | RedirectResponse:
    """Save the edit form; errors next to their field."""
    cid = parse_id(channel_id, "channel id")
    box = box_of(request)
    channel = service.channel_out(service.get_channel(session, channel_id=cid), box)
    data, shown = channel_update(form, channel.kind, channel.options)
    if data is None or shown.errors:
        return _form_page(request, shown, channel=channel, status_code=422)
    if "team" in data.model_fields_set:
        require_team(request, data.team)
    try:
        service.update_channel(
            session, channel_id=cid, data=data, box=box, allow_hosts=allow_hosts(request)
        )
    except (BadRequest, Conflict) as exc:
        session.rollback()
        key, message = error_key(exc.detail)
        shown.errors[key] = message
        return _form_page(request, shown, channel=channel, status_code=exc.status_code)
    return see_other(request, f"/notifications#channel-{cid}")


@router.post("/notifications/channels/{channel_id}/enabled", response_model=None)
def set_enabled(
    request: Request, session: WriteSessionDep, channel_id: str, form: FormDep
) -> RedirectResponse:
    """Enable (``enabled=true``) or disable (``false``) a channel; 400 naming ``enabled``."""
    cid = parse_id(channel_id, "channel id")
    value = form.one("enabled")
    if value not in ("true", "false"):
        raise BadRequest(f"enabled: expected true or false, got {value[:20]!r}")
    service.update_channel(
        session,
        channel_id=cid,
        data=ChannelUpdate(enabled=value == "true"),
        box=box_of(request),
        allow_hosts=allow_hosts(request),
    )
    return see_other(request, f"/notifications#channel-{cid}")


@router.get("/notifications/channels/{channel_id}/delete", response_class=HTMLResponse)
def confirm_delete(request: Request, session: SessionDep, channel_id: str) -> HTMLResponse:
    """Asks first: deleting a channel also deletes its routes and delivery log."""
    cid = parse_id(channel_id, "channel id")
    channel = service.channel_out(service.get_channel(session, channel_id=cid), box_of(request))
    n_routes = len(service.list_routes(session, channel_id=cid))
    context: dict[str, Any] = {"nav": "notifications", "channel": channel, "n_routes": n_routes}
    return render(request, "notify/channel_delete.html", context)


@router.post("/notifications/channels/{channel_id}/delete", response_model=None)
def delete_channel(request: Request, session: WriteSessionDep, channel_id: str) -> Response:
    """Delete the channel (its routes and deliveries cascade)."""
    service.delete_channel(session, channel_id=parse_id(channel_id, "channel id"))
    return see_other(request, "/notifications")


@router.post("/notifications/channels/{channel_id}/test", response_model=None)
def send_test(request: Request, session: WriteSessionDep, channel_id: str) -> Response:
    """Queue the test message. htmx gets the result fragment (which follows the delivery until
    it is delivered or failed); a plain form post goes to the channel's delivery log."""
    cid = parse_id(channel_id, "channel id")
    try:
        row = service.send_test(session, channel_id=cid)
    except BadRequest as exc:
        if not is_htmx(request):
            raise
        context = {"channel_id": cid, "row": None, "error": exc.detail}
        return render(request, "notify/_test_result.html", context, 400)
    if is_htmx(request):
        return render(
            request, "notify/_test_result.html", {"channel_id": cid, "row": row, "error": None}
        )
    return see_other(request, f"/notifications/channels/{cid}")


# After this module's routes: ``/notifications/channels/new`` must win over ``…/{channel_id}``.
router.include_router(ui_deliveries.router)
router.include_router(ui_routes.router)
