"""The one place access is enforced: match the request to its route, look the route up in
:data:`app.access.policy.POLICY`, resolve the caller (:func:`app.access.identity.resolve`),
refuse or pass, and write unsafe calls to the audit trail.

Refusals: 401 when credentials are missing or wrong (API: JSON with ``WWW-Authenticate:
Bearer``; a page GET: 303 to ``/login?next=…``; htmx: ``HX-Redirect``), 403 when the role or
team does not allow it, and 403 for a route without a decision (never open by omission).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi.routing import iter_route_contexts
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import compile_path, get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.access import policy
from app.access.identity import Identity, anonymous, resolve
from app.access.roles import Role
from app.access.sessions import COOKIE_NAME
from app.audit import service as audit
from app.db import session_scope
from app.errors import Forbidden, Unauthenticated
from app.web import render_error_page

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Key in the request state of what an endpoint adds to its audit row (:func:`note_audit`).
AUDIT_DETAIL = "audit_detail"


@dataclass(frozen=True)
class MatchedRoute:
    """The route a request goes to: its template, path parameters and decision (``None``:
    the policy table has none)."""

    template: str
    params: dict[str, str]
    decision: policy.Decision | None


@dataclass(frozen=True)
class _Entry:
    regex: re.Pattern[str]
    methods: frozenset[str]
    template: str


def route_table(app: Any) -> list[_Entry]:
    """The app's routes with methods, in matching order (built once per app)."""
    table: list[_Entry] | None = getattr(app.state, "access_routes", None)
    if table is None:
        table = []
        for ctx in iter_route_contexts(app.routes):
            methods = ctx.methods
            path = ctx.path
            if not methods or not path:
                continue
            regex, _, _ = compile_path(path)
            table.append(_Entry(regex, frozenset(methods), path))
        app.state.access_routes = table
    return table


def match(app: Any, method: str, path: str) -> MatchedRoute | None:
    """The route ``method path`` goes to, ``None`` when none (404/405 from the app)."""
    for entry in route_table(app):
        found = entry.regex.match(path)
        if found is None or method not in entry.methods:
            continue
        return MatchedRoute(
            entry.template, found.groupdict(), policy.decision(method, entry.template)
        )
    return None


@dataclass(frozen=True)
class Refusal:
    status: int
    detail: str


def _cookie(scope: Scope, name: str) -> str | None:
    for key, value in scope["headers"]:
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                if k == name and v:
                    return v
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def client_address(scope: Scope) -> str:
    """The peer address of the connection (``-`` when unknown)."""
    client = scope.get("client")
    return str(client[0]) if client else "-"


class AccessMiddleware:
    """ASGI middleware enforcing :data:`app.access.policy.POLICY` (see the module docstring).
    ``anonymous_role``: what a request without credentials gets (``None``: nothing);
    ``session_idle_s``: a login session's idle timeout (``None``: none)."""

    def __init__(
        self, app: ASGIApp, *, anonymous_role: Role | None, session_idle_s: float | None = None
    ) -> None:
        self.app = app
        self.anonymous_role = anonymous_role
        self.session_idle_s = session_idle_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The path the router matches: under a root path (uvicorn --root-path) the scope's
        # path starts with it, and matching the whole of it would find no route (unchecked).
        route_path = get_route_path(scope)
        if route_path.startswith(policy.PUBLIC_MOUNTS):
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        matched = match(scope["app"], method, route_path)
        if matched is None or isinstance(
            matched.decision, (policy.AgentToken, policy.EnrollmentToken)
        ):
            # No route (the app answers 404/405) or an agent route: the ingest checks the
            # node token itself, one indexed read per batch.
            await self.app(scope, receive, send)
            return
        factory = scope["app"].state.session_factory
        identity, refusal = await run_in_threadpool(self._authorize, factory, scope, matched)
        scope.setdefault("state", {})["identity"] = identity
        audited = method not in SAFE_METHODS and getattr(matched.decision, "audit", False)
        if refusal is not None:
            response = self._refuse(scope, receive, refusal)
            await response(scope, receive, send)
            if audited or matched.decision is None:
                await run_in_threadpool(
                    self._audit, factory, scope, matched, identity, refusal.status
                )
            return
        status: list[int] = []

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        with audit.collecting_changes() as changes:
            try:
                await self.app(scope, receive, send_status if audited else send)
            finally:
                if audited:
                    code = status[0] if status else 500
                    detail = audit.change_detail(changes) if code < 400 else None
                    await run_in_threadpool(
                        self._audit, factory, scope, matched, identity, code, detail
                    )

    def _authorize(
        self, factory: Any, scope: Scope, matched: MatchedRoute
    ) -> tuple[Identity, Refusal | None]:
        decision = matched.decision
        with session_scope(factory) as session:
            try:
                identity = resolve(
                    session,
                    authorization=_header(scope, b"authorization"),
                    session_cookie=_cookie(scope, COOKIE_NAME),
                    anonymous_role=self.anonymous_role,
                    session_idle_s=self.session_idle_s,
                )
            except Unauthenticated as exc:
                if isinstance(decision, policy.Public):
                    return anonymous(self.anonymous_role), None
                return anonymous(self.anonymous_role), Refusal(401, exc.detail)
            if isinstance(decision, policy.Public):
                return identity, None
            if decision is None:
                return identity, Refusal(
                    403, f"{scope['method']} {matched.template} has no access decision"
                )
            assert isinstance(decision, policy.Need)
            if identity.kind == "agent":
                return identity, Refusal(
                    403, "an agent token may only post its node's batches (/api/v1/ingest)"
                )
            if identity.role is None:
                return identity, Refusal(401, "log in or send 'Authorization: Bearer <API token>'")
            if identity.kind == "anonymous" and not identity.has(decision.role):
                # Anonymous read-only mode: a change asks for a login, not a dead end.
                return identity, Refusal(
                    401,
                    "log in or send 'Authorization: Bearer <API token>' (anonymous access is "
                    "read-only)",
                )
            if not identity.has(decision.role):
                return identity, Refusal(
                    403,
                    f"{identity.actor} is {identity.role.name}; this needs "
                    f"{decision.role.name} or above",
                )
            if decision.team_of is not None:
                team = decision.team_of(session, matched.params)
                if not identity.acts_for(team):
                    teams = ", ".join(sorted(identity.teams or ())) or "no team"
                    return identity, Refusal(
                        403, f"owned by team {team}; {identity.actor} acts for {teams}"
                    )
            return identity, None

    @staticmethod
    def _refuse(scope: Scope, receive: Receive, refusal: Refusal) -> Response:
        path = get_route_path(scope)
        if path.startswith("/api/") or path == "/metrics":
            headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
            return JSONResponse({"detail": refusal.detail}, refusal.status, headers=headers)
        request = Request(scope, receive)
        if refusal.status == 401:
            target = path + (
                f"?{scope['query_string'].decode('latin-1')}" if scope["query_string"] else ""
            )
            if request.headers.get("hx-request") == "true":
                # A partial's refresh: back to the page the browser shows, not the fragment.
                shown = urlsplit(request.headers.get("hx-current-url", ""))
                if shown.path.startswith("/") and not shown.path.startswith("//"):
                    target = shown.path + (f"?{shown.query}" if shown.query else "")
                login = f"/login?next={quote(target, safe='')}"
                return Response(status_code=401, headers={"HX-Redirect": login})
            login = f"/login?next={quote(target, safe='')}"
            if scope["method"] in SAFE_METHODS:
                return RedirectResponse(login, status_code=303)
        return render_error_page(request, status_code=refusal.status, detail=refusal.detail)

    @staticmethod
    def _audit(
        factory: Any,
        scope: Scope,
        matched: MatchedRoute,
        identity: Identity,
        status: int,
        detail: dict[str, Any] | None = None,
    ) -> None:
        try:
            with session_scope(factory) as session:
                audit.record(
                    session,
                    actor=identity.actor,
                    action=f"{scope['method']} {matched.template}",
                    address=client_address(scope),
                    target=matched.params or None,
                    status=status,
                    # What the services noted of the change (before/after) and what the
                    # endpoint noted of the call (acting_as …), in one detail.
                    detail={**(detail or {}), **scope.get("state", {}).get(AUDIT_DETAIL, {})}
                    or None,
                )
        except Exception:  # the change is made; a lost audit row is logged, never a 500 after it
            log.exception(
                "could not write the audit event of %s %s", scope["method"], matched.template
            )


def identity_of(request: Request) -> Identity:
    """The identity the middleware resolved for ``request`` (anonymous without a role where
    the route is not behind the middleware, e.g. agent routes)."""
    found = request.scope.get("state", {}).get("identity")
    return found if isinstance(found, Identity) else anonymous(None)


def require_team(request: Request, team: str | None) -> None:
    """Refuse giving an object to ``team`` (a rule's ``owner_team``, a channel's or route's
    ``team`` in a request body) unless the caller acts for it: the path-level check in the
    policy sees only the object as stored, not the team a body moves it to.

    Raises:
        Forbidden: the caller is not an admin, not an every-team token, and not in ``team``.
    """
    who = identity_of(request)
    if not who.acts_for(team):
        teams = ", ".join(sorted(who.teams or ())) or "no team"
        raise Forbidden(f"{who.actor} acts for {teams}; it cannot give an object to team {team}")


def sole_team(request: Request) -> str | None:
    """The caller's team when it acts for exactly one (a team-scoped token, a user of one
    team, not an admin): where a new silence or runbook edit goes when nothing else decides."""
    who = identity_of(request)
    if who.role == Role.admin or who.teams is None or len(who.teams) != 1:
        return None
    return next(iter(who.teams))


def note_audit(request: Request, **detail: Any) -> None:
    """Add ``detail`` (JSON-able: ``before``, ``after``, ``acting_as`` …) to the audit row the
    middleware writes for this request."""
    state = request.scope.setdefault("state", {})
    state.setdefault(AUDIT_DETAIL, {}).update(detail)


def acting_name(request: Request, given: str) -> str:
    """Who an acknowledgement or silence is recorded as: a logged-in user's own name (not
    what a form says); for an API token the name given in the request (automation acting
    for someone), the token itself being in the audit trail with this name (``acting_as``)."""
    who = identity_of(request)
    name = who.name if who.kind == "user" else given
    note_audit(request, acting_as=name)
    return name


def params_of(values: Mapping[str, Any]) -> dict[str, str]:
    """Path parameters as strings (for the audit ``target``)."""
    return {k: str(v) for k, v in values.items()}
