"""Enrollment tokens: an admin makes one (expiry, number of nodes); a new node's agent sends
it once to ``POST /api/v1/enroll`` with its hostname and gets its own node token back.

A node that already has a live token cannot be enrolled again (409): an enrollment token must
not let anyone take over an existing node's identity; revoke its tokens first to re-enroll.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth import service as node_tokens
from app.auth.models import EnrollmentToken, NodeToken
from app.db import utcnow
from app.errors import BadRequest, Conflict, NotFound, Unauthenticated
from app.fleet import service as fleet_service

ENROLL_PREFIX = "fwe_"
MAX_USES = 100_000
MAX_TTL_S = 30 * 86400.0


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create(
    session: Session, *, name: str, max_uses: int, ttl_s: float, created_by: str
) -> tuple[EnrollmentToken, str]:
    """A new enrollment token; returns the row and the token (shown once).

    Raises:
        BadRequest: ``max_uses`` outside 1..100000, ``ttl_s`` outside (0, 30 days], or an
            empty or over-long name, or one with a control character (Postgres text cannot
            hold NUL).
    """
    if not 1 <= max_uses <= MAX_USES:
        raise BadRequest(f"max_uses: 1 .. {MAX_USES}")
    if not 0 < ttl_s <= MAX_TTL_S:
        raise BadRequest(f"ttl_s: above 0 and at most {int(MAX_TTL_S)} (30 days)")
    if not name.strip() or len(name) > 64 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise BadRequest("name: 1-64 characters, no control characters")
    now = utcnow()
    token = ENROLL_PREFIX + secrets.token_urlsafe(32)
    row = EnrollmentToken(
        name=name.strip(),
        token_sha256=_digest(token),
        prefix=token[:12],
        created_by=created_by[:128],
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
        max_uses=max_uses,
        uses=0,
    )
    session.add(row)
    session.flush()
    return row, token


def enroll(session: Session, *, token: str, hostname: str) -> tuple[EnrollmentToken, str]:
    """Exchange ``token`` for a node token of ``hostname`` (the node is created when new).

    Returns:
        the enrollment token's row (its ``uses`` counted) and the new node token.

    Raises:
        Unauthenticated: unknown, revoked, expired or used-up enrollment token.
        Conflict: the node already has a live token. BadRequest: not a valid hostname.
    """
    row = session.scalars(
        select(EnrollmentToken)
        .where(EnrollmentToken.token_sha256 == _digest(token))
        .with_for_update()  # two nodes enrolling at once count two uses (Postgres row lock)
    ).one_or_none()
    now = utcnow()
    if row is None or row.revoked_at is not None:
        raise Unauthenticated("unknown or revoked enrollment token")
    if row.expires_at <= now:
        raise Unauthenticated("expired enrollment token")
    if row.uses >= row.max_uses:
        raise Unauthenticated(f"enrollment token used up ({row.max_uses} nodes)")
    try:
        node = fleet_service.get_node_by_hostname(session, hostname=hostname)
    except NotFound:
        node = None
    if node is not None:
        live = session.scalars(
            select(NodeToken.id).where(NodeToken.node_id == node.id, NodeToken.revoked_at.is_(None))
        ).first()
        if live is not None:
            raise Conflict(
                f"{hostname} already has an agent token; an enrollment token cannot take over "
                "a node (revoke its tokens first to enroll it again)"
            )
    try:
        _, node_token = node_tokens.create_token(session, hostname=hostname)
    except ValueError as exc:
        raise BadRequest(f"hostname: {exc}") from None
    row.uses += 1
    session.flush()
    return row, node_token


def list_all(session: Session) -> list[EnrollmentToken]:
    """Every enrollment token, newest first."""
    return list(session.scalars(select(EnrollmentToken).order_by(EnrollmentToken.id.desc())))


def revoke(session: Session, *, token_id: int) -> EnrollmentToken:
    """Revoke an enrollment token.

    Raises:
        NotFound: no such token.
    """
    row = session.get(EnrollmentToken, token_id)
    if row is None:
        raise NotFound(f"no enrollment token with id {token_id}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row
