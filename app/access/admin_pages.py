"""``/admin/access``: users and API tokens for admins — create (the password or token is
shown once, in the answer, never in a URL), disable or enable a user, revoke a token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import sessions, tokens, users
from app.access.middleware import identity_of
from app.access.roles import Role
from app.alerts.page_views import parse_id
from app.auth import service as agent_tokens
from app.db import SessionDep, WriteSessionDep
from app.errors import FleetwatchError
from app.forms import Form, read_form
from app.web import render

router = APIRouter(include_in_schema=False)

TTL_CHOICES = {
    "": None,
    "1d": 86400.0,
    "30d": 30 * 86400.0,
    "90d": 90 * 86400.0,
    "365d": 365 * 86400.0,
}


def _page(
    request: Request,
    session: Session,
    *,
    shown: dict[str, Any] | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    context = {
        "nav": None,
        "users": users.list_users(session),
        "tokens": tokens.list_tokens(session),
        "agent_tokens": agent_tokens.list_tokens(session),
        "teams": users.list_teams(session),
        "roles": [r.name for r in Role],
        "ttls": list(TTL_CHOICES),
        "shown": shown,
        "error": error,
    }
    return render(request, "access/admin.html", context, status_code)


@router.get("/admin/access", response_class=HTMLResponse)
def access_page(request: Request, session: SessionDep) -> HTMLResponse:
    """Users, teams and API tokens."""
    return _page(request, session)


def _role(text: str) -> Role:
    try:
        return Role.parse(text)
    except ValueError as exc:
        raise FleetwatchError(f"role: {exc}") from None


@router.post("/admin/users", response_class=HTMLResponse)
def create_user(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> HTMLResponse:
    """Create a user; the page shows its one-time password once."""
    teams = [t.strip() for t in form.one("teams").split(",") if t.strip()]
    try:
        user, password = users.create_user(
            session, name=form.one("name"), role=_role(form.one("role")), teams=teams
        )
    except FleetwatchError as exc:
        session.rollback()
        return _page(request, session, error=exc.detail, status_code=exc.status_code)
    shown = {"what": f"One-time password of {user.name}", "secret": password}
    return _page(request, session, shown=shown, status_code=201)


@router.post("/admin/users/{name}/active")
def set_user_active(
    name: str, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> Response:
    """Disable (and log out) or enable a user."""
    active = form.one("active") == "true"
    user = users.set_active(session, name=name, active=active)
    if not active:
        sessions.revoke_user_sessions(session, user.id)
    return RedirectResponse("/admin/access", status_code=303)


@router.post("/admin/tokens", response_class=HTMLResponse)
def create_token(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> HTMLResponse:
    """Create an API token; the page shows it once."""
    ttl = form.one("ttl")
    try:
        if ttl not in TTL_CHOICES:
            raise FleetwatchError(f"ttl: one of {', '.join(k or 'never' for k in TTL_CHOICES)}")
        row, secret = tokens.create_token(
            session,
            name=form.one("name"),
            role=_role(form.one("role")),
            team=form.one("team") or None,
            created_by=identity_of(request).actor,
            ttl_s=TTL_CHOICES[ttl],
        )
    except FleetwatchError as exc:
        session.rollback()
        return _page(request, session, error=exc.detail, status_code=exc.status_code)
    shown = {"what": f"API token {row.name} ({row.role})", "secret": secret}
    return _page(request, session, shown=shown, status_code=201)


@router.post("/admin/tokens/{token_id}/revoke")
def revoke_token(token_id: str, session: WriteSessionDep) -> Response:
    """Revoke a token at once."""
    number = parse_id(token_id, "token id")
    tokens.revoke(session, token_id=number)
    return RedirectResponse("/admin/access", status_code=303)


@router.post("/admin/agent-tokens", response_class=HTMLResponse)
def create_agent_token(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> HTMLResponse:
    """A new agent token for a node (created when new); shown once. The node's other tokens
    stay valid until revoked: rotate by installing the new one, then revoking the old."""
    hostname = form.one("hostname")
    try:
        _, secret = agent_tokens.create_token(session, hostname=hostname)
    except ValueError as exc:
        session.rollback()
        return _page(request, session, error=f"hostname: {exc}", status_code=400)
    shown = {"what": f"Agent token of {hostname}", "secret": secret}
    return _page(request, session, shown=shown, status_code=201)


@router.post("/admin/agent-tokens/{token_id}/revoke")
def revoke_agent_token(token_id: str, session: WriteSessionDep) -> Response:
    """Revoke one agent token at once."""
    number = parse_id(token_id, "token id")
    agent_tokens.revoke_token(session, token_id=number)
    return RedirectResponse("/admin/access", status_code=303)
