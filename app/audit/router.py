"""The audit trail: ``GET /api/v1/audit`` and the ``/audit`` page, with the same filters."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from app.api_params import MAX_ID
from app.audit import service
from app.audit.service import AuditFilter
from app.db import SessionDep
from app.errors import BadRequest
from app.timebounds import checked_utc
from app.web import render

router = APIRouter()
api = APIRouter(prefix="/api/v1", tags=["audit"])
#: ``before_id``: an ``audit_event`` id (Postgres INTEGER), so bounded as every row id is.
BeforeId = Annotated[int | None, Query(ge=1, le=MAX_ID, description="next page: the last id seen")]


def _utc(name: str, value: datetime | None) -> datetime | None:
    if value is None:
        return None
    try:
        return checked_utc(value)
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}") from None


def _filter(
    actor: str | None,
    action: str | None,
    since: datetime | None,
    until: datetime | None,
    before_id: int | None,
    limit: int,
) -> AuditFilter:
    """The filter of a request; raises BadRequest naming ``since`` or ``until`` when a time has
    no offset or lies outside :mod:`app.timebounds`' range."""
    return AuditFilter(
        actor=actor or None,
        action=action or None,
        since=_utc("since", since),
        until=_utc("until", until),
        before_id=before_id,
        limit=limit,
    )


@api.get("/audit")
def audit_api(
    session: SessionDep,
    actor: Annotated[
        str | None, Query(max_length=160, description="exact, e.g. user:alice")
    ] = None,
    action: Annotated[
        str | None, Query(max_length=255, description="substring, e.g. /rules")
    ] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before_id: BeforeId = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIMIT)] = 200,
) -> list[dict[str, Any]]:
    """Audit events, newest first: ``id``, ``at``, ``actor``, ``address``, ``action``
    (``METHOD /route/{template}`` or ``login``, ``user.create`` …), ``target`` (path
    parameters), ``status`` (HTTP status answered), ``detail``."""
    flt = _filter(actor, action, since, until, before_id, limit)
    return [service.event_out(row) for row in service.list_events(session, flt)]


@router.get("/audit", response_class=HTMLResponse, include_in_schema=False)
def audit_page(
    request: Request,
    session: SessionDep,
    actor: Annotated[str | None, Query(max_length=160)] = None,
    action: Annotated[str | None, Query(max_length=255)] = None,
    before_id: BeforeId = None,
) -> HTMLResponse:
    """The audit trail as a table, filtered by actor and action, 200 a page."""
    flt = _filter(actor, action, None, None, before_id, 200)
    rows = service.list_events(session, flt)
    context = {
        "nav": None,
        "rows": rows,
        "actor": actor or "",
        "action": action or "",
        "next_before": rows[-1].id if len(rows) == flt.limit else None,
    }
    return render(request, "audit/page.html", context)
