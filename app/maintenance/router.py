"""``/api/v1/maintenance``: maintenance windows listed, created and ended."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.orm import Session

from app.alerts import service as alerts_service
from app.api_params import IdPath
from app.db import SessionDep, WriteSessionDep, utcnow
from app.fleet import service as fleet_service
from app.maintenance import service
from app.maintenance.models import MaintenanceWindow
from app.maintenance.schemas import MaintenanceEndIn, MaintenanceIn, MaintenanceOut

router = APIRouter(prefix="/api/v1", tags=["maintenance"])


def window_out(session: Session, window: MaintenanceWindow) -> MaintenanceOut:
    """The window's :class:`MaintenanceOut`."""
    now = utcnow()
    out = MaintenanceOut.model_validate(window)
    out.in_force = window.starts_at <= now < window.ends_at
    out.nodes = service.selected(session, window.matchers)
    return out


@router.get("/maintenance", response_model=list[MaintenanceOut])
def list_windows(session: SessionDep, include_ended: bool = False) -> list[MaintenanceOut]:
    """Windows in force or to come, soonest first (every window, newest first, with
    ``include_ended``)."""
    return [window_out(session, w) for w in service.listing(session, include_ended=include_ended)]


@router.get(
    "/maintenance/{window_id}",
    response_model=MaintenanceOut,
    responses={404: {"description": "No such window"}},
)
def get_window(session: SessionDep, window_id: IdPath) -> MaintenanceOut:
    """One window."""
    return window_out(session, service.get(session, window_id))


@router.post(
    "/maintenance",
    response_model=MaintenanceOut,
    status_code=201,
    responses={
        400: {"description": "Bad times, no reason, or matchers that select no node"},
        404: {"description": "No node has that hostname"},
    },
)
def create_window(session: WriteSessionDep, body: MaintenanceIn) -> MaintenanceOut:
    """Put one node (``hostname``) or a group (``matchers`` over node labels and
    ``hostname``) in maintenance from ``starts_at`` (default now) to ``ends_at``: their
    alerts are muted, automation leaves them alone, the time is left out of availability."""
    if body.hostname is not None:
        node = fleet_service.get_node_by_hostname(session, hostname=body.hostname)
        matchers = service.host_matchers(node.hostname)
    else:
        matchers = [m.model_dump() for m in body.matchers or []]
    window = service.create(
        session,
        matchers=matchers,
        reason=body.reason,
        starts_at=body.starts_at,
        ends_at=body.ends_at,
        created_by=body.created_by,
    )
    alerts_service.refresh_silenced(session)
    return window_out(session, window)


@router.post(
    "/maintenance/{window_id}/end",
    response_model=MaintenanceOut,
    responses={404: {"description": "No such window"}, 409: {"description": "Ended already"}},
)
def end_window(
    session: WriteSessionDep, window_id: IdPath, body: MaintenanceEndIn
) -> MaintenanceOut:
    """End the window now (cancel one not started yet); its nodes' alerts page again."""
    window = service.end(session, window_id=window_id, actor=body.ended_by)
    alerts_service.refresh_silenced(session)
    return window_out(session, window)
