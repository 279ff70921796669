"""API tokens for automation: a role, optionally one team, an expiry; hashed at rest, shown
once, ``last_used_at`` kept (to the minute), revocable."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.access.models import ApiToken, Team
from app.access.roles import Role
from app.access.secrets import digest, new_secret
from app.access.users import check_name, get_team
from app.db import utcnow
from app.errors import BadRequest, NotFound

TOKEN_PREFIX = "fwk_"
#: ``last_used_at`` is written at most this often per token (one UPDATE a minute, not per call).
LAST_USED_RESOLUTION_S = 60.0


def create_token(
    session: Session,
    *,
    name: str,
    role: Role,
    team: str | None,
    created_by: str,
    ttl_s: float | None,
) -> tuple[ApiToken, str]:
    """Create a token acting as ``role`` for ``team`` (``None``: every team), expiring
    ``ttl_s`` from now (``None``: never).

    Returns:
        the row and the token itself (shown once, never stored).

    Raises:
        BadRequest: invalid name or a ttl not above 0. NotFound: no such team.
    """
    check_name("token", name)
    if ttl_s is not None and ttl_s <= 0:
        raise BadRequest("ttl_s must be above 0 (or absent for a token that never expires)")
    team_id = get_team(session, team).id if team is not None else None
    now = utcnow()
    token = new_secret(TOKEN_PREFIX)
    row = ApiToken(
        name=name,
        token_sha256=digest(token),
        prefix=token[:12],
        role=role.name,
        team_id=team_id,
        created_by=created_by[:128],
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_s) if ttl_s is not None else None,
    )
    session.add(row)
    session.flush()
    return row, token


def lookup(session: Session, token: str, *, now: datetime | None = None) -> ApiToken | None:
    """The live (not revoked, not expired) token ``token``; records its use."""
    now = now or utcnow()
    row = session.scalars(
        select(ApiToken).where(
            ApiToken.token_sha256 == digest(token), ApiToken.revoked_at.is_(None)
        )
    ).one_or_none()
    if row is None or (row.expires_at is not None and row.expires_at <= now):
        return None
    if (
        row.last_used_at is None
        or (now - row.last_used_at).total_seconds() >= LAST_USED_RESOLUTION_S
    ):
        row.last_used_at = now
        session.flush()
    return row


def team_name(session: Session, row: ApiToken) -> str | None:
    """The name of ``row``'s team, ``None`` for an every-team token."""
    if row.team_id is None:
        return None
    return session.scalars(select(Team.name).where(Team.id == row.team_id)).one()


def list_tokens(session: Session) -> list[tuple[ApiToken, str | None]]:
    """Every token (revoked and expired included) with its team name, newest first."""
    rows = session.execute(
        select(ApiToken, Team.name)
        .outerjoin(Team, Team.id == ApiToken.team_id)
        .order_by(ApiToken.created_at.desc(), ApiToken.id.desc())
    ).all()
    return [(r[0], r[1]) for r in rows]


def revoke(session: Session, *, token_id: int) -> ApiToken:
    """Revoke token ``token_id`` (a second revoke keeps the first time).

    Raises:
        NotFound: no such token.
    """
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound(f"no API token with id {token_id}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row
