"""The one-click acknowledgement page: ``GET /notify/ack/{token}`` shows the alert and one
button (GET never changes anything: chat services fetch links to unfurl them);
``POST /notify/ack/{token}`` acknowledges it through :func:`app.alerts.service.ack`.

There is no UI login yet, so the signed link is the only credential (see
:mod:`app.notify.ack_links`); once authentication exists the POST must require it too.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.alerts import service as alert_service
from app.db import SessionDep, WriteSessionDep
from app.errors import BadRequest, NotFound
from app.notify.ack_links import AckClaim, AckLinkInvalid
from app.notify.jobs import signer_for
from app.web import render, render_error_page

router = APIRouter(tags=["notifications"], include_in_schema=False)

ACK_OWNER = "ack link"
ACK_NOTE = "acknowledged from a notification's one-click link"


def _claim(request: Request, token: str) -> AckClaim:
    return signer_for(request.app.state.settings).read(token)


def _page(
    request: Request, session: Session, token: str, *, done: bool = False, status_code: int = 200
) -> HTMLResponse:
    try:
        claim = _claim(request, token)
        inst, rule = alert_service.get_alert(session, alert_id=claim.alert_id)
    except AckLinkInvalid as exc:
        return render_error_page(request, status_code=400, detail=str(exc))
    except NotFound:
        return render_error_page(request, status_code=404, detail="the alert no longer exists")
    if inst.fingerprint != claim.fingerprint:
        return render_error_page(request, status_code=400, detail="this link is not valid")
    context = {"nav": "alerts", "token": token, "alert": inst, "rule": rule, "done": done}
    return render(request, "notify/ack.html", context, status_code)


@router.get("/notify/ack/{token}", response_class=HTMLResponse)
def ack_confirm(request: Request, session: SessionDep, token: str) -> HTMLResponse:
    """The confirmation page (changes nothing)."""
    return _page(request, session, token)


@router.post("/notify/ack/{token}", response_class=HTMLResponse)
def ack_apply(request: Request, session: WriteSessionDep, token: str) -> HTMLResponse:
    """Acknowledge the link's alert; the page then says so. 400 for an invalid or expired link
    or an alert that is no longer pending or firing."""
    try:
        claim = _claim(request, token)
        inst, _ = alert_service.get_alert(session, alert_id=claim.alert_id)
    except AckLinkInvalid as exc:
        return render_error_page(request, status_code=400, detail=str(exc))
    except NotFound:
        return render_error_page(request, status_code=404, detail="the alert no longer exists")
    if inst.fingerprint != claim.fingerprint:
        return render_error_page(request, status_code=400, detail="this link is not valid")
    if not inst.acked:
        try:
            alert_service.ack(session, alert_id=inst.id, owner=ACK_OWNER, note=ACK_NOTE)
        except BadRequest as exc:
            return render_error_page(request, status_code=400, detail=exc.detail)
    return _page(request, session, token, done=True)
