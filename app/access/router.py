"""Login and logout pages; ``/api/v1/whoami``; the users and API-token API (admins)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from app.access import oidc, sessions, tokens, users
from app.access.middleware import client_address, identity_of
from app.access.roles import Role
from app.access.sessions import COOKIE_NAME, LoginLimits, TooManyAttempts
from app.api_params import IdPath
from app.audit import service as audit
from app.db import SessionDep, WriteSessionDep
from app.errors import BadRequest, FleetwatchError, NotFound
from app.notify.secrets import secret_key
from app.web import render, templates

log = logging.getLogger(__name__)
router = APIRouter()

#: The login form's limits: a longer name or password is a wrong login (neither hashed nor
#: looked up as given), a longer ``next`` is cut.
MAX_FORM_NAME_CHARS = 64
MAX_PASSWORD_CHARS = 1024
MAX_NEXT_CHARS = 2048
api = APIRouter(prefix="/api/v1", tags=["access"])

templates.env.globals["identity_of"] = identity_of


def safe_next(target: str | None) -> str:
    """``target`` when it is a path on this server (``/…`` but not ``//…``), else ``/``: the
    login form never redirects elsewhere."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def _secure(request: Request) -> bool:
    """Whether the cookie gets ``Secure``: served over TLS, or the external URL is https."""
    external = request.app.state.settings.external_url or ""
    return request.url.scheme == "https" or external.startswith("https://")


def _limits(request: Request) -> LoginLimits:
    s = request.app.state.settings
    return LoginLimits(
        per_user=s.login_max_failures_per_user,
        per_address=s.login_max_failures_per_address,
        window_s=s.login_failure_window_s,
    )


def _login_context(
    request: Request, target: str, error: str | None, username: str
) -> dict[str, Any]:
    return {
        "nav": None,
        "next": target,
        "error": error,
        "username": username,
        "sso": oidc.OidcConfig.of(request.app.state.settings) is not None,
    }


@router.get("/login", response_class=HTMLResponse, include_in_schema=False)
def login_page(request: Request, next: str | None = None) -> HTMLResponse:
    """The login form (with a single sign-on button when OIDC is configured)."""
    return render(
        request,
        "access/login.html",
        _login_context(request, safe_next(next), None, ""),
    )


@router.post("/login", include_in_schema=False)
def login_submit(
    request: Request,
    session: WriteSessionDep,
    username: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    """Check the password; on success a new session (the old cookie's is revoked) and a 303 to
    ``next``; else the form again with 401 (429 past the failed-login limit). A name past 64
    characters or a password past 1,024 is a wrong login (the form again, counted as a
    failure), not a validation error echoing the password back."""
    address = client_address(request.scope)
    target = safe_next(next[:MAX_NEXT_CHARS])
    username = username.strip()
    if len(password) > MAX_PASSWORD_CHARS or len(username) > MAX_FORM_NAME_CHARS:
        # Fails as a wrong password does (no local password is empty), recorded and limited;
        # the over-long value itself is never hashed or looked up.
        username, password = username[:MAX_FORM_NAME_CHARS], ""
    try:
        found = sessions.login(
            session,
            username=username,
            password=password,
            address=address,
            ttl_s=request.app.state.settings.session_ttl_s,
            limits=_limits(request),
            previous=request.cookies.get(COOKIE_NAME),
        )
    except TooManyAttempts as exc:
        audit.record(
            session,
            actor=f"user:{username[:64]}",
            action="login",
            address=address,
            status=429,
            detail={"result": "rate-limited"},
        )
        context = _login_context(request, target, str(exc), username)
        response = render(request, "access/login.html", context, 429)
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    if found is None:
        audit.record(
            session,
            actor=f"user:{username[:64]}",
            action="login",
            address=address,
            status=401,
            detail={"result": "wrong name or password"},
        )
        context = _login_context(request, target, "Wrong user name or password.", username)
        return render(request, "access/login.html", context, 401)
    user, token = found
    audit.record(session, actor=f"user:{user.name}", action="login", address=address, status=303)
    return _logged_in(request, target, token)


def _logged_in(request: Request, target: str, token: str) -> Response:
    """A 303 to ``target`` setting the session cookie (HttpOnly, SameSite=Lax, Secure over
    TLS)."""
    redirect = RedirectResponse(target, status_code=303)
    redirect.set_cookie(
        COOKIE_NAME,
        token,
        max_age=int(request.app.state.settings.session_ttl_s),
        path="/",
        secure=_secure(request),
        httponly=True,
        samesite="lax",
    )
    return redirect


def _callback_url(request: Request) -> str:
    base = request.app.state.settings.external_url or str(request.base_url)
    return base.rstrip("/") + "/login/oidc/callback"


def _provider_logout(request: Request) -> str | None:
    """The identity provider's logout URL for this server's single sign-on, back to
    ``/login``; ``None`` (local logout only, logged) when it is not configured any more, names
    no logout endpoint or cannot be reached."""
    config = oidc.OidcConfig.of(request.app.state.settings)
    if config is None:
        return None
    base = request.app.state.settings.external_url or str(request.base_url)
    try:
        return oidc.logout_url(config, post_logout_redirect_uri=base.rstrip("/") + "/login")
    except oidc.OidcError as exc:
        log.warning("logout: the identity provider's session stays open: %s", exc)
        return None


@router.get("/login/oidc", include_in_schema=False)
def oidc_start(request: Request, next: str | None = None) -> Response:
    """Send the browser to the identity provider (single sign-on)."""
    config = oidc.OidcConfig.of(request.app.state.settings)
    if config is None:
        raise NotFound("single sign-on is not configured (FLEETWATCH_OIDC_ISSUER)")
    try:
        url, cookie = oidc.start(
            config,
            redirect_uri=_callback_url(request),
            next_path=safe_next(next),
            key=secret_key(request.app.state.settings),
        )
    except oidc.OidcError as exc:
        return render(
            request,
            "access/login.html",
            _login_context(request, safe_next(next), str(exc), ""),
            502,
        )
    redirect = RedirectResponse(url, status_code=303)
    redirect.set_cookie(
        oidc.STATE_COOKIE,
        cookie,
        max_age=oidc.STATE_MAX_AGE_S,
        path="/login/oidc",
        secure=_secure(request),
        httponly=True,
        samesite="lax",
    )
    return redirect


@router.get("/login/oidc/callback", include_in_schema=False)
def oidc_callback(request: Request, session: WriteSessionDep) -> Response:
    """The identity provider's answer: check it, create or update the user from its groups,
    open a session."""
    config = oidc.OidcConfig.of(request.app.state.settings)
    if config is None:
        raise NotFound("single sign-on is not configured (FLEETWATCH_OIDC_ISSUER)")
    address = client_address(request.scope)
    try:
        sso, target = oidc.finish(
            config,
            params=dict(request.query_params),
            cookie=request.cookies.get(oidc.STATE_COOKIE),
            redirect_uri=_callback_url(request),
            key=secret_key(request.app.state.settings),
        )
        user = users.sync_sso_user(session, name=sso.name, role=sso.role, teams=sorted(sso.teams))
    except (oidc.OidcError, FleetwatchError) as exc:
        detail = exc.detail if isinstance(exc, FleetwatchError) else str(exc)
        audit.record(
            session,
            actor="anonymous",
            action="login.oidc",
            address=address,
            status=401,
            detail={"result": detail},
        )
        response = render(
            request, "access/login.html", _login_context(request, "/", detail, ""), 401
        )
        response.delete_cookie(oidc.STATE_COOKIE, path="/login/oidc")
        return response
    token = sessions.open_session(
        session,
        user,
        address=address,
        ttl_s=request.app.state.settings.session_ttl_s,
        previous=request.cookies.get(COOKIE_NAME),
        via_sso=True,
    )
    audit.record(
        session,
        actor=f"user:{user.name}",
        action="login.oidc",
        address=address,
        status=303,
        detail={"role": sso.role.name, "teams": sorted(sso.teams), "groups": list(sso.groups)},
    )
    done = _logged_in(request, safe_next(target), token)
    done.delete_cookie(oidc.STATE_COOKIE, path="/login/oidc")
    return done


@router.post("/logout", include_in_schema=False)
def logout(request: Request, reader: SessionDep, session: WriteSessionDep) -> Response:
    """End this browser's session and go to the login page; a single sign-on session goes on
    to the identity provider's logout (a page that navigates there: see
    ``access/logged_out.html``), which sends the browser back to the login page."""
    cookie = request.cookies.get(COOKIE_NAME)
    # The provider is asked (its discovery: up to oidc.HTTP_TIMEOUT_S) before the write
    # transaction begins: on SQLite that holds the whole database, every agent's batch waiting.
    found = sessions.not_revoked(reader, cookie) if cookie else None
    provider = _provider_logout(request) if found is not None and found.via_sso else None
    closed = sessions.revoke(session, cookie) if cookie else None
    target = "/login"
    if closed is not None:
        if closed.via_sso:
            target = provider or target
        audit.record(
            session,
            actor=identity_of(request).actor,
            action="logout",
            address=client_address(request.scope),
            status=303,
            detail={"identity_provider": target != "/login"} if closed.via_sso else None,
        )
    response: Response = RedirectResponse(target, status_code=303)
    if target != "/login":
        response = render(request, "access/logged_out.html", {"provider_url": target})
    response.delete_cookie(
        COOKIE_NAME, path="/", secure=_secure(request), httponly=True, samesite="lax"
    )
    return response


class WhoAmI(BaseModel):
    """The caller: ``kind`` anonymous/user/token/agent, its role (``None``: none) and teams
    (``None``: every team)."""

    kind: str
    name: str
    role: str | None
    teams: list[str] | None


@api.get("/whoami")
def whoami(request: Request) -> WhoAmI:
    """Who this request is authenticated as."""
    who = identity_of(request)
    return WhoAmI(
        kind=who.kind,
        name=who.name,
        role=who.role.name if who.role is not None else None,
        teams=sorted(who.teams) if who.teams is not None else None,
    )


class UserIn(BaseModel):
    """A new local user; without ``password`` a one-time password is generated and returned."""

    name: str = Field(max_length=64)
    role: str = "viewer"
    teams: list[str] = Field(default_factory=list, max_length=100)
    password: str | None = Field(default=None, max_length=1024)


class UserOut(BaseModel):
    name: str
    role: str
    teams: list[str]
    active: bool
    created_at: datetime
    last_login_at: datetime | None


class UserCreated(UserOut):
    #: Shown once: the generated password, ``None`` when the caller chose it.
    one_time_password: str | None


def _role(text: str) -> Role:
    try:
        return Role.parse(text)
    except ValueError as exc:
        raise BadRequest(f"role: {exc}") from None


@api.get("/users")
def list_users(session: SessionDep) -> list[UserOut]:
    """Every local user (never a password hash)."""
    return [
        UserOut(
            name=u.name,
            role=u.role,
            teams=sorted(t),
            active=u.active,
            created_at=u.created_at,
            last_login_at=u.last_login_at,
        )
        for u, t in users.list_users(session)
    ]


@api.post("/users", status_code=201)
def create_user(request: Request, session: WriteSessionDep, body: UserIn) -> UserCreated:
    """Create a local user."""
    user, password = users.create_user(
        session, name=body.name, role=_role(body.role), teams=body.teams, password=body.password
    )
    audit.record(
        session,
        actor=identity_of(request).actor,
        action="user.create",
        address=client_address(request.scope),
        target={"user": user.name},
        detail={"after": {"role": user.role, "teams": sorted(body.teams)}},
    )
    return UserCreated(
        name=user.name,
        role=user.role,
        teams=sorted(body.teams),
        active=user.active,
        created_at=user.created_at,
        last_login_at=None,
        one_time_password=password if body.password is None else None,
    )


class TokenIn(BaseModel):
    """A new API token: ``role`` and ``team`` (``None``: every team), ``ttl_s`` (``None``:
    never expires)."""

    name: str = Field(max_length=64)
    role: str = "viewer"
    team: str | None = Field(default=None, max_length=64)
    ttl_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400)


class TokenOut(BaseModel):
    id: int
    name: str
    prefix: str
    role: str
    team: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    #: Shown once; only its SHA-256 digest is stored.
    token: str


def _token_out(row: Any, team: str | None) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "prefix": row.prefix,
        "role": row.role,
        "team": team,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "last_used_at": row.last_used_at,
        "revoked_at": row.revoked_at,
    }


@api.get("/tokens")
def list_tokens(session: SessionDep) -> list[TokenOut]:
    """Every API token (never the secret): prefix, scope, expiry, last use, revocation."""
    return [TokenOut(**_token_out(row, team)) for row, team in tokens.list_tokens(session)]


@api.post("/tokens", status_code=201)
def create_token(request: Request, session: WriteSessionDep, body: TokenIn) -> TokenCreated:
    """Create an API token; the answer is the only time the token is shown."""
    who = identity_of(request)
    row, secret = tokens.create_token(
        session,
        name=body.name,
        role=_role(body.role),
        team=body.team,
        created_by=who.actor,
        ttl_s=body.ttl_s,
    )
    audit.record(
        session,
        actor=who.actor,
        action="token.create",
        address=client_address(request.scope),
        target={"token_id": row.id},
        detail={
            "after": {"name": row.name, "role": row.role, "team": body.team, "prefix": row.prefix}
        },
    )
    return TokenCreated(**_token_out(row, body.team), token=secret)


@api.post("/tokens/{token_id}/revoke")
def revoke_token(request: Request, session: WriteSessionDep, token_id: IdPath) -> TokenOut:
    """Revoke an API token (at once: the next call with it is refused)."""
    row = tokens.revoke(session, token_id=token_id)
    team = tokens.team_name(session, row)
    return TokenOut(**_token_out(row, team))
