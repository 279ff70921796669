"""``GET /api/v1/incidents`` and ``GET /api/v1/incidents/{id}``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request

from app.api_params import IdPath
from app.db import SessionDep, utcnow
from app.incidents import service, views
from app.incidents.schemas import IncidentDetailOut, IncidentOut

router = APIRouter(prefix="/api/v1", tags=["incidents"])


@router.get("/incidents", response_model=list[IncidentOut], summary="Incidents, newest first")
def list_incidents(
    request: Request,
    session: SessionDep,
    node: Annotated[str | None, Query(max_length=253, description="hostname")] = None,
    status: Annotated[Literal["open", "closed"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> list[IncidentOut]:
    """Incidents by their last event, newest first: of one node, open or closed now."""
    rows = service.list_incidents(
        session,
        quiet_s=request.app.state.settings.incident_quiet_s,
        now=utcnow(),
        hostname=node,
        status=status,
        limit=limit,
    )
    return [views.incident_out(r) for r in rows]


@router.get("/incidents/{incident_id}", response_model=IncidentDetailOut, summary="One incident")
def get_incident(request: Request, session: SessionDep, incident_id: IdPath) -> IncidentDetailOut:
    """The incident with its events and the alerts it caused. 404 for an unknown id."""
    return views.incident_detail(
        session,
        incident_id=incident_id,
        quiet_s=request.app.state.settings.incident_quiet_s,
        now=utcnow(),
    )
