"""Route pages: which severities of which team go to which channel, grouped by which labels,
after what group wait and repeated how often. Create, edit and delete (with confirmation) by
form POST and redirect; the list is part of ``/notifications``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access.middleware import require_team
from app.alerts.page_views import parse_id
from app.db import SessionDep, WriteSessionDep
from app.errors import BadRequest
from app.notify import service
from app.notify.models import NotifyRoute
from app.notify.outbox import DEFAULT_GROUP_BY, DEFAULT_REPEAT_INTERVAL_S
from app.notify.schemas import SEVERITIES
from app.notify.ui_common import FormDep, see_other
from app.notify.ui_forms import RouteForm, error_key, route_in, route_typed
from app.web import render

router = APIRouter(include_in_schema=False)
NO_TEAM = "All teams"


def routes_by_team(routes: Sequence[NotifyRoute]) -> list[tuple[str, list[NotifyRoute]]]:
    """Routes grouped by team: catch-all routes ("All teams") first, then teams by name."""
    groups: dict[str | None, list[NotifyRoute]] = {}
    for r in routes:
        groups.setdefault(r.team, []).append(r)
    order = sorted(groups, key=lambda t: (t is not None, t or ""))
    return [(t or NO_TEAM, groups[t]) for t in order]


def _defaults(team: str = "", channel_id: str = "") -> dict[str, Any]:
    return {
        "channel_id": channel_id,
        "team": team,
        "severities": [],
        "group_by": ", ".join(DEFAULT_GROUP_BY),
        "group_wait_s": "",  # empty: the default by severity (RouteIn)
        "repeat_interval_s": f"{DEFAULT_REPEAT_INTERVAL_S:g}",
    }


def _form_page(
    request: Request,
    session: Session,
    form: RouteForm,
    *,
    route_id: int | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    context = {
        "nav": "notifications",
        "form": form,
        "route_id": route_id,
        "channels": service.list_channels(session),
        "severities": SEVERITIES,
    }
    return render(request, "notify/route_form.html", context, status_code)


@router.get("/notifications/routes/new", response_class=HTMLResponse)
def new_route(
    request: Request, session: SessionDep, team: str = "", channel: str = ""
) -> HTMLResponse:
    """The create form with Alertmanager-like defaults (``?team=``, ``?channel=`` prefill)."""
    return _form_page(request, session, RouteForm(_defaults(team[:128], channel[:18])))


def _save(
    request: Request, session: Session, form: FormDep, route_id: int | None
) -> HTMLResponse | RedirectResponse:
    data, shown = route_in(form)
    if data is None or shown.errors:
        return _form_page(request, session, shown, route_id=route_id, status_code=422)
    require_team(request, data.team)
    try:
        if route_id is None:
            service.create_route(session, data=data)
        else:
            service.replace_route(session, route_id=route_id, data=data)
    except BadRequest as exc:
        key, message = error_key(exc.detail)
        shown.errors[key] = message
        return _form_page(request, session, shown, route_id=route_id, status_code=400)
    return see_other(request, "/notifications#routes")


@router.post("/notifications/routes", response_model=None)
def create_route(
    request: Request, session: WriteSessionDep, form: FormDep
) -> HTMLResponse | RedirectResponse:
    """Create a route; errors next to their field."""
    return _save(request, session, form, None)


@router.get("/notifications/routes/{route_id}/edit", response_class=HTMLResponse)
def edit_route(request: Request, session: SessionDep, route_id: str) -> HTMLResponse:
    """The edit form of a route (404 when unknown)."""
    rid = parse_id(route_id, "route id")
    route = service.get_route(session, route_id=rid)
    return _form_page(request, session, RouteForm(route_typed(route)), route_id=rid)


@router.post("/notifications/routes/{route_id}/edit", response_model=None)
def update_route(
    request: Request, session: WriteSessionDep, route_id: str, form: FormDep
) -> HTMLResponse | RedirectResponse:
    """Replace a route's settings; errors next to their field."""
    rid = parse_id(route_id, "route id")
    service.get_route(session, route_id=rid)
    return _save(request, session, form, rid)


@router.get("/notifications/routes/{route_id}/delete", response_class=HTMLResponse)
def confirm_delete(request: Request, session: SessionDep, route_id: str) -> HTMLResponse:
    """Asks before deleting a route."""
    route = service.get_route(session, route_id=parse_id(route_id, "route id"))
    channel = service.get_channel(session, channel_id=route.channel_id)
    context = {"nav": "notifications", "route": route, "channel": channel}
    return render(request, "notify/route_delete.html", context)


@router.post("/notifications/routes/{route_id}/delete", response_model=None)
def delete_route(request: Request, session: WriteSessionDep, route_id: str) -> Response:
    """Delete the route."""
    service.delete_route(session, route_id=parse_id(route_id, "route id"))
    return see_other(request, "/notifications#routes")
