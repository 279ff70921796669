"""Browser sessions: created at login (always a new id: rotation), looked up per request,
revoked at logout; and the failed-login rate limit.

The cookie carries the session id; the table keeps only its SHA-256 digest, so a copy of the
database does not let anyone in. Sessions expire ``session_ttl_s`` after login (absolute) or
``session_idle_s`` after their last request (idle), whichever comes first; closed sessions and
failed logins past their window are pruned (:func:`prune`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete, func, select
from sqlalchemy.orm import Session

from app.access.models import LoginFailure, User, UserSession
from app.access.secrets import digest, new_secret, verify_password
from app.db import utcnow

COOKIE_NAME = "fw_session"
SESSION_PREFIX = "fws_"
#: A session's last request is written at most once a minute (a page's panels refresh every
#: few seconds: one write each would be a write per request), or a tenth of the idle timeout
#: when that is shorter; the idle timeout is exact to it.
LAST_SEEN_RESOLUTION_S = 60.0
#: Closed (expired, idle or revoked) sessions stay this long before they are pruned.
CLOSED_KEPT_S = 86400.0


class TooManyAttempts(Exception):
    """Too many failed logins lately for this user name or address; ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class LoginLimits:
    """At most ``per_user`` failures per user name and ``per_address`` per client address
    within ``window_s``; beyond that every attempt is refused until the window passes."""

    per_user: int = 5
    per_address: int = 20
    window_s: float = 900.0


def _check_limits(session: Session, *, username: str, address: str, limits: LoginLimits) -> None:
    since = utcnow() - timedelta(seconds=limits.window_s)
    by_user = session.scalar(
        select(func.count())
        .select_from(LoginFailure)
        .where(LoginFailure.username == username[:64], LoginFailure.at >= since)
    )
    by_address = session.scalar(
        select(func.count())
        .select_from(LoginFailure)
        .where(LoginFailure.address == address[:64], LoginFailure.at >= since)
    )
    if (by_user or 0) >= limits.per_user:
        raise TooManyAttempts(
            f"too many failed logins for this user; try again in {int(limits.window_s)} s",
            int(limits.window_s),
        )
    if (by_address or 0) >= limits.per_address:
        raise TooManyAttempts(
            f"too many failed logins from this address; try again in {int(limits.window_s)} s",
            int(limits.window_s),
        )


def login(
    session: Session,
    *,
    username: str,
    password: str,
    address: str,
    ttl_s: float,
    limits: LoginLimits,
    previous: str | None = None,
) -> tuple[User, str] | None:
    """Check ``username``/``password`` and open a session.

    ``previous`` (the session cookie the browser sent, if any) is revoked: a login always gets
    a fresh id (no session fixation).

    Returns:
        the user and the new session id (for the cookie only), or ``None`` when the name or
        password is wrong or the user is disabled (the failure is recorded).

    Raises:
        TooManyAttempts: the rate limit is reached (nothing is checked).
    """
    _check_limits(session, username=username, address=address, limits=limits)
    user = session.scalars(select(User).where(User.name == username[:64])).one_or_none()
    ok = verify_password(password, user.password_hash if user is not None else None)
    if user is None or not ok or not user.active:
        session.add(LoginFailure(username=username[:64], address=address[:64], at=utcnow()))
        session.flush()
        return None
    # A successful login clears the user's failures: the limit is about guessing, not typos.
    session.execute(delete(LoginFailure).where(LoginFailure.username == user.name))
    return user, open_session(session, user, address=address, ttl_s=ttl_s, previous=previous)


def open_session(
    session: Session,
    user: User,
    *,
    address: str,
    ttl_s: float,
    previous: str | None = None,
    via_sso: bool = False,
) -> str:
    """A new session of ``user`` (after a password check, or a single sign-on: ``via_sso``),
    revoking the ``previous`` one; returns the session id for the cookie."""
    if previous:
        revoke(session, previous)
    now = utcnow()
    token = new_secret(SESSION_PREFIX)
    session.add(
        UserSession(
            user_id=user.id,
            token_sha256=digest(token),
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_s),
            address=address[:64],
            via_sso=via_sso,
        )
    )
    user.last_login_at = now
    session.flush()
    return token


def lookup(
    session: Session, token: str, *, idle_s: float | None = None, now: datetime | None = None
) -> User | None:
    """The active user of session id ``token`` when it is neither expired, revoked nor idle
    for ``idle_s`` seconds or more (``None``: no idle limit); records the request."""
    now = now or utcnow()
    row = session.execute(
        select(User, UserSession)
        .join(UserSession, UserSession.user_id == User.id)
        .where(
            UserSession.token_sha256 == digest(token),
            UserSession.revoked_at.is_(None),
            UserSession.expires_at > now,
            User.active.is_(True),
        )
    ).one_or_none()
    if row is None:
        return None
    user, open_session_row = row
    last = open_session_row.last_seen_at or open_session_row.created_at
    if idle_s is not None and (now - last).total_seconds() >= idle_s:
        return None
    # The mark lags the last request by up to the resolution: a tenth of a short idle timeout
    # (60 s would let a session in use every 59 s end at a 60-s timeout).
    resolution_s = (
        LAST_SEEN_RESOLUTION_S if idle_s is None else min(LAST_SEEN_RESOLUTION_S, idle_s / 10)
    )
    if (now - last).total_seconds() >= resolution_s:
        open_session_row.last_seen_at = now
        session.flush()
    return user


def prune(
    session: Session,
    *,
    idle_s: float,
    failure_window_s: float,
    now: datetime | None = None,
) -> dict[str, int]:
    """Delete sessions closed (expired, idle for ``idle_s``, revoked) more than a day ago
    (:data:`CLOSED_KEPT_S`) and failed logins older than ``failure_window_s``, which no
    limit counts any more.

    Returns:
        rows deleted: ``{"user_session": n, "login_failure": m}``.
    """
    now = now or utcnow()
    closed_before = now - timedelta(seconds=CLOSED_KEPT_S)
    idle_before = closed_before - timedelta(seconds=idle_s)
    sessions = cast(
        CursorResult[Any],
        session.execute(
            delete(UserSession).where(
                (UserSession.expires_at < closed_before)
                | (UserSession.revoked_at < closed_before)
                | (func.coalesce(UserSession.last_seen_at, UserSession.created_at) < idle_before)
            )
        ),
    )
    failures = cast(
        CursorResult[Any],
        session.execute(
            delete(LoginFailure).where(LoginFailure.at < now - timedelta(seconds=failure_window_s))
        ),
    )
    return {
        "user_session": int(sessions.rowcount or 0),
        "login_failure": int(failures.rowcount or 0),
    }


def not_revoked(session: Session, token: str) -> UserSession | None:
    """Session id ``token`` when it is not revoked (expired or idle ones included); a read."""
    return session.scalars(
        select(UserSession).where(
            UserSession.token_sha256 == digest(token), UserSession.revoked_at.is_(None)
        )
    ).one_or_none()


def revoke(session: Session, token: str) -> UserSession | None:
    """Revoke session id ``token``; the session when it was open (``None``: it was not)."""
    row = not_revoked(session, token)
    if row is None:
        return None
    row.revoked_at = utcnow()
    session.flush()
    return row


def revoke_user_sessions(session: Session, user_id: int) -> int:
    """Revoke every open session of ``user_id`` (disabled user, password reset); how many."""
    rows = session.scalars(
        select(UserSession).where(UserSession.user_id == user_id, UserSession.revoked_at.is_(None))
    ).all()
    now = utcnow()
    for row in rows:
        row.revoked_at = now
    session.flush()
    return len(rows)
