"""Who a request comes from: an API token, a session cookie, an agent token or nobody.

Resolved once per request by :mod:`app.access.middleware` and kept in
``request.state.identity``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.access import sessions, tokens
from app.access.roles import Role
from app.access.users import user_teams
from app.auth import service as agent_tokens
from app.errors import FleetwatchError, Unauthenticated


@dataclass(frozen=True)
class Identity:
    """``kind``: ``anonymous``, ``user``, ``token`` or ``agent``; ``role``: ``None`` for an
    agent and for anonymous without FLEETWATCH_ANONYMOUS_ROLE; ``teams``: the teams it acts
    for, ``None`` for every team (admins, tokens without a team)."""

    kind: str
    name: str
    role: Role | None
    teams: frozenset[str] | None = None

    @property
    def actor(self) -> str:
        """``kind:name`` as the audit trail writes it (``anonymous`` alone)."""
        return "anonymous" if self.kind == "anonymous" else f"{self.kind}:{self.name}"

    def has(self, role: Role) -> bool:
        """Whether this identity's role is ``role`` or above."""
        return self.role is not None and self.role >= role

    def acts_for(self, team: str | None) -> bool:
        """Whether it may act on an object owned by ``team`` (``None``: no owner, shared)."""
        if team is None or self.teams is None or self.role == Role.admin:
            return True
        return team in self.teams


def anonymous(role: Role | None) -> Identity:
    """The identity of a request without credentials."""
    return Identity(kind="anonymous", name="anonymous", role=role)


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, ``None`` when absent.

    Raises:
        Unauthenticated: an Authorization header of another form.
    """
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("Authorization header must be 'Bearer <token>'")
    return token


def resolve(
    session: Session,
    *,
    authorization: str | None,
    session_cookie: str | None,
    anonymous_role: Role | None,
    session_idle_s: float | None = None,
) -> Identity:
    """The identity of a request: a bearer token first, else the session cookie, else
    anonymous. A cookie naming no live session counts as no cookie (expired, idle, logged out).

    Raises:
        Unauthenticated: a bearer token that is unknown, expired or revoked.
    """
    token = bearer(authorization)
    if token is not None:
        if token.startswith(tokens.TOKEN_PREFIX):
            row = tokens.lookup(session, token)
            if row is None:
                raise Unauthenticated("unknown, expired or revoked API token")
            team = tokens.team_name(session, row)
            return Identity(
                kind="token",
                name=row.name,
                role=Role[row.role],
                teams=None if team is None else frozenset({team}),
            )
        try:
            node_id = agent_tokens.authenticate(session, authorization=authorization)
        except FleetwatchError:
            raise Unauthenticated("unknown or revoked token") from None
        return Identity(kind="agent", name=f"node-{node_id}", role=None)
    if session_cookie:
        user = sessions.lookup(session, session_cookie, idle_s=session_idle_s)
        if user is not None:
            role = Role[user.role]
            teams = None if role == Role.admin else user_teams(session, user.id)
            return Identity(kind="user", name=user.name, role=role, teams=teams)
    return anonymous(anonymous_role)
