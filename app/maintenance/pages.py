"""``/maintenance``: windows in force, to come and ended, the create form (nodes by label
matchers or one hostname; start and end or a duration; reason; author) with errors beside the
fields, and "end now". The node page's "maintenance" form posts here too (``back`` returns to
it). Prefilled from ``?hostname=…``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.alerts import service as alerts_service
from app.alerts.page_forms import SilenceForm, validate_silence
from app.alerts.page_views import parse_id
from app.alerts.silences import MATCH_OPS
from app.db import SessionDep, WriteSessionDep, utcnow
from app.errors import BadRequest
from app.forms import Form, back_path, read_form
from app.maintenance import service
from app.viewer_time import tz_query, viewer_tz
from app.web import render

router = APIRouter(include_in_schema=False)

#: Ended windows listed.
ENDED_SHOWN = 100


#: The shared silence editor's messages that speak of silences and alerts, as a maintenance
#: form says them.
_WORDING = {
    "who creates this silence (required)": "who puts the nodes in maintenance (required)",
    "at least one matcher (e.g. alertname = gpu-hot)": (
        "at least one matcher (e.g. hostname = gpu-07, or rack = r12)"
    ),
}


def _page(
    request: Request,
    session: Session,
    form: SilenceForm,
    *,
    status_code: int = 200,
    back: str = "",
) -> HTMLResponse:
    """The page; ``back``: where a corrected form returns (the node page that sent it), kept
    in the re-rendered form."""
    now = utcnow()
    windows = service.listing(session, include_ended=True, now=now)
    current = sorted(
        (w for w in windows if w.ends_at > now and w.ends_at > w.starts_at),
        key=lambda w: w.starts_at,
    )
    matchers = form.matcher_dicts()
    would_cover = None
    if matchers and not any(k.startswith("matchers") for k in form.errors):
        would_cover = service.selected(session, matchers)
    return render(
        request,
        "maintenance/page.html",
        {
            "nav": "maintenance",
            "form": form,
            "ops": MATCH_OPS,
            "current": [(w, service.selected(session, w.matchers)) for w in current],
            "ended": [w for w in windows if w.ends_at <= now or w.ends_at <= w.starts_at][
                :ENDED_SHOWN
            ],
            "now": now,
            "would_cover": would_cover,
            "back": back_path(back, ""),
        },
        status_code,
    )


def _back(request: Request, back: str) -> RedirectResponse:
    tz = tz_query(request)
    return RedirectResponse(back_path(back, f"/maintenance{'?' + tz if tz else ''}"), 303)


@router.get("/maintenance", response_class=HTMLResponse)
def maintenance_page(
    request: Request,
    session: SessionDep,
    hostname: Annotated[str, Query(max_length=255, description="node to prefill")] = "",
) -> HTMLResponse:
    """Maintenance windows and the create form, prefilled for ``hostname``."""
    rows = [(service.HOSTNAME, "=", hostname)] if hostname else []
    return _page(request, session, SilenceForm(matchers=rows, duration="4h"))


@router.post("/maintenance", response_model=None)
def create_window(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> Response:
    """Create a window and go back (to ``back`` where the node page sent it); 422 with the
    errors beside their fields."""
    typed = SilenceForm.from_form(form)
    typed.comment = form.one("reason")
    typed = validate_silence(typed, zone=viewer_tz(request), now=utcnow())
    typed.errors.update({k: _WORDING.get(v, v) for k, v in typed.errors.items()})
    if not typed.comment.strip():
        typed.errors["comment"] = "say why the nodes are in maintenance (required)"
    back = form.one("back")
    if typed.errors or typed.starts_at is None or typed.ends_at is None:
        return _page(request, session, typed, status_code=422, back=back)
    try:
        service.create(
            session,
            matchers=typed.matcher_dicts(),
            reason=typed.comment,
            starts_at=typed.starts_at,
            ends_at=typed.ends_at,
            created_by=typed.created_by,
        )
    except BadRequest as exc:
        field, _, message = exc.detail.partition(": ")
        key = {"reason": "comment", "ends_at": "ends", "starts_at": "starts"}.get(field, field)
        typed.errors[key] = message or exc.detail
        return _page(request, session, typed, status_code=422, back=back)
    alerts_service.refresh_silenced(session)
    return _back(request, back)


@router.post("/maintenance/{window_id}/end", response_model=None)
def end_window(
    request: Request,
    session: WriteSessionDep,
    window_id: str,
    form: Annotated[Form, Depends(read_form)],
) -> Response:
    """End a window now (400 for a non-numeric id, 404 if unknown, 409 if ended), back to
    the list (or ``back``)."""
    number = parse_id(window_id, "maintenance window id")
    service.end(session, window_id=number, actor=form.one("ended_by") or "web")
    alerts_service.refresh_silenced(session)
    return _back(request, form.one("back"))
