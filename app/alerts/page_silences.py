"""``/silences``: active and expired silences, the create form (label matchers with ``=``,
``!=``, ``=~``, ``!~``; start and end or a duration; author; comment) with errors beside the
fields, and "expire now". Prefilled from ``?matcher=name=value`` ("silence like this")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access.middleware import acting_name, identity_of
from app.alerts import service as alert_service
from app.alerts import silence_teams
from app.alerts.page_forms import SilenceForm, validate_silence
from app.alerts.page_views import parse_id
from app.alerts.silences import MATCH_OPS
from app.db import SessionDep, WriteSessionDep, utcnow
from app.forms import Form, read_form
from app.viewer_time import tz_query, viewer_tz
from app.web import render

router = APIRouter(include_in_schema=False)


def _page(
    request: Request, session: Session, form: SilenceForm, *, status_code: int = 200
) -> HTMLResponse:
    """The page with ``form`` as typed, and how many active alerts its matchers would mute."""
    now = utcnow()
    silences = alert_service.list_silences(session, include_expired=True)
    matchers = form.matcher_dicts()
    would_mute = None
    if matchers and not any(k.startswith("matchers") for k in form.errors):
        would_mute = len(alert_service.silence_matches(session, matchers=matchers))
    return render(
        request,
        "silences/page.html",
        {
            "nav": "alerts",
            "form": form,
            "ops": MATCH_OPS,
            "active": [s for s in silences if s.ends_at > now],
            "expired": [s for s in silences if s.ends_at <= now][:100],
            "now": now,
            "would_mute": would_mute,
        },
        status_code,
    )


@router.get("/silences", response_class=HTMLResponse)
def silences_page(
    request: Request,
    session: SessionDep,
    matcher: Annotated[list[str], Query(description="name=value to prefill")] = [],  # noqa: B006
) -> HTMLResponse:
    """Silences and the create form, prefilled from ``matcher`` parameters."""
    rows = []
    for item in matcher:
        name, _, value = item.partition("=")
        rows.append((name.strip(), "=", value))
    who = identity_of(request)
    author = who.name if who.kind == "user" else ""
    return _page(request, session, SilenceForm(matchers=rows, duration="2h", created_by=author))


@router.post("/silences", response_model=None)
def create_silence(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> Response:
    """Create a silence and go back to the list; 422 with the errors beside their fields."""
    posted = SilenceForm.from_form(form)
    posted.created_by = acting_name(request, posted.created_by)
    typed = validate_silence(posted, zone=viewer_tz(request), now=utcnow())
    if typed.errors or typed.starts_at is None or typed.ends_at is None:
        return _page(request, session, typed, status_code=422)
    matchers = typed.matcher_dicts()
    team = silence_teams.choose_team(request, session, given=typed.team or None, matchers=matchers)
    alert_service.create_silence(
        session,
        matchers=matchers,
        team=team,
        starts_at=typed.starts_at,
        ends_at=typed.ends_at,
        created_by=typed.created_by,
        comment=typed.comment,
    )
    tz = tz_query(request)
    return RedirectResponse(f"/silences{'?' + tz if tz else ''}", status_code=303)


@router.post("/silences/{silence_id}/expire", response_model=None)
def expire_silence(request: Request, session: WriteSessionDep, silence_id: str) -> Response:
    """End a silence now (400 for a non-numeric id, 404 if unknown), back to the list."""
    number = parse_id(silence_id, "silence id")
    alert_service.expire_silence(session, silence_id=number)
    tz = tz_query(request)
    return RedirectResponse(f"/silences{'?' + tz if tz else ''}", status_code=303)
