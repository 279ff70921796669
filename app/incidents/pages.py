"""HTML pages of incidents: ``/incidents`` (open first, then the last 7 days' closed ones) and
``/incidents/{id}`` (its events, GPUs, Xids, suggested repair and the alerts it caused)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from app.api_params import IdPath
from app.db import SessionDep, utcnow
from app.incidents import offenders, service, views
from app.lifecycle import pages as lifecycle_pages
from app.remediation.service import Backends
from app.web import render

router = APIRouter(include_in_schema=False)

#: How far back the list page shows closed incidents.
CLOSED_SHOWN = timedelta(days=7)


@router.get("/incidents", response_class=HTMLResponse)
def incidents_page(
    request: Request,
    session: SessionDep,
    node: Annotated[str | None, Query(max_length=253)] = None,
    status: Annotated[Literal["open", "closed"] | None, Query()] = None,
) -> HTMLResponse:
    """Open incidents, then closed ones of the last 7 days (of ``node`` when given)."""
    now = utcnow()
    rows = service.list_incidents(
        session,
        quiet_s=request.app.state.settings.incident_quiet_s,
        now=now,
        hostname=node or None,
        status=status,
        since=now - CLOSED_SHOWN,
        limit=500,
    )
    rows.sort(key=lambda r: (not r.open, -r.incident.last_event_at.timestamp()))
    context = {
        "nav": "incidents",
        "rows": rows,
        "node": node or "",
        "status": status or "",
        "repeat_nodes": offenders.repeat_nodes(session, now=now),
        "repeat_gpus": offenders.repeat_gpus(session, now=now),
        "now": now,
    }
    return render(request, "incidents/list.html", context)


@router.get("/incidents/{incident_id}", response_class=HTMLResponse)
def incident_page(request: Request, session: SessionDep, incident_id: IdPath) -> HTMLResponse:
    """One incident (404 page for an unknown id)."""
    detail = views.incident_detail(
        session,
        incident_id=incident_id,
        quiet_s=request.app.state.settings.incident_quiet_s,
        now=utcnow(),
    )
    rec = lifecycle_pages.incident_recommendation(
        session,
        hostname=detail.hostname,
        incident_id=detail.id,
        xids=detail.xids,
        gpus=detail.gpu_indexes,
        action_code=detail.action_code,
        action_text=detail.action_text,
        test=detail.test,
    )
    managed = Backends.of(request.app.state.settings).names
    context = {"nav": "incidents", "i": detail, "rec": rec, "managed": managed}
    return render(request, "incidents/page.html", context)
