"""``/admin/access``: users, API tokens, enrollment tokens and agent tokens for admins — create
(the password or token is shown once, in the answer, never in a URL), disable or enable a user,
revoke a token. Agent tokens are listed a page at a time (:data:`AGENT_PAGE`), filtered by
hostname: a fleet of 5,000 nodes has at least as many."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from app.access import sessions, tokens, users
from app.access.middleware import identity_of
from app.access.roles import Role
from app.alerts.page_views import parse_id
from app.auth import enrollment
from app.auth import service as agent_tokens
from app.db import SessionDep, WriteSessionDep, utcnow
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
#: Enrollment token lifetimes offered by the form (at most 30 days, as the API allows).
ENROLL_TTL_CHOICES = {"1h": 3600.0, "1d": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}
#: Agent tokens per page of ``/admin/access``.
AGENT_PAGE = 100


def _agent_listing(request: Request, session: Session) -> dict[str, Any]:
    """One page of agent tokens from the query ``agent_host`` (hostname contains, at most 253
    characters) and ``agent_before`` (token id, the next page).

    Raises:
        BadRequest: ``agent_before`` not an id.
    """
    host = request.query_params.get("agent_host", "").strip()[:253]
    raw_before = request.query_params.get("agent_before", "")
    before = parse_id(raw_before, "agent_before") if raw_before else None
    rows = agent_tokens.list_tokens(
        session, hostname_contains=host or None, before_id=before, limit=AGENT_PAGE + 1
    )
    live, revoked = agent_tokens.count_tokens(session)
    return {
        "agent_tokens": rows[:AGENT_PAGE],
        "agent_next": rows[AGENT_PAGE - 1][0].id if len(rows) > AGENT_PAGE else None,
        "agent_host": host,
        "agent_paged": before is not None,
        "agent_counts": {"live": live, "revoked": revoked},
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
        "enrollment_tokens": enrollment.list_all(session),
        "enroll_ttls": list(ENROLL_TTL_CHOICES),
        "now": utcnow(),
        **_agent_listing(request, session),
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


@router.post("/admin/enrollment-tokens", response_class=HTMLResponse)
def create_enrollment_token(
    request: Request, session: WriteSessionDep, form: Annotated[Form, Depends(read_form)]
) -> HTMLResponse:
    """An enrollment token (name, how many nodes, expiry); the page shows it once."""
    ttl = form.one("ttl")
    raw_uses = form.one("max_uses").strip()
    try:
        if ttl not in ENROLL_TTL_CHOICES:
            raise FleetwatchError(f"ttl: one of {', '.join(ENROLL_TTL_CHOICES)}")
        if not raw_uses.isascii() or not raw_uses.isdigit() or len(raw_uses) > 7:
            raise FleetwatchError(f"max_uses: a whole number 1 .. {enrollment.MAX_USES}")
        row, secret = enrollment.create(
            session,
            name=form.one("name"),
            max_uses=int(raw_uses),
            ttl_s=ENROLL_TTL_CHOICES[ttl],
            created_by=identity_of(request).actor,
        )
    except FleetwatchError as exc:
        session.rollback()
        return _page(request, session, error=exc.detail, status_code=exc.status_code)
    until = f"{row.expires_at:%Y-%m-%d %H:%M} UTC"
    shown = {"what": f"Enrollment token {row.name} ({row.max_uses} nodes, until {until})"}
    shown["secret"] = secret
    return _page(request, session, shown=shown, status_code=201)


@router.post("/admin/enrollment-tokens/{token_id}/revoke")
def revoke_enrollment_token(token_id: str, session: WriteSessionDep) -> Response:
    """Revoke an enrollment token at once (the nodes it enrolled keep their own tokens)."""
    number = parse_id(token_id, "token id")
    enrollment.revoke(session, token_id=number)
    return RedirectResponse("/admin/access", status_code=303)
