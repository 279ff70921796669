"""Tables of users, teams, browser sessions, API tokens and failed logins.

Secrets are never stored: a password as its argon2 hash (pwdlib), a session id and an API token
as the SHA-256 hex digest of a 256-bit random string.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Column, ForeignKey, Integer, String, Table, false
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime

user_team = Table(
    "user_team",
    Base.metadata,
    Column("user_id", ForeignKey("app_user.id", ondelete="CASCADE"), primary_key=True),
    Column("team_id", ForeignKey("team.id", ondelete="CASCADE"), primary_key=True),
)


class Team(Base):
    """A team: owns rules, channels, routes, runbooks (by name, e.g. ``rule.owner_team``)."""

    __tablename__ = "team"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class User(Base):
    """A local user. ``role``: viewer, responder, editor or admin (see :mod:`app.access.roles`);
    ``password_hash``: pwdlib's argon2 string, ``None`` for a user who cannot log in locally."""

    __tablename__ = "app_user"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_login_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class UserSession(Base):
    """A browser session: the cookie carries the id, the row only its digest."""

    __tablename__ = "user_session"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("app_user.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    address: Mapped[str | None] = mapped_column(String(64))
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: The last request seen (to :data:`app.access.sessions.LAST_SEEN_RESOLUTION_S`); ``None``:
    #: none since the login.
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: Opened by single sign-on: its logout also sends the browser to the provider's logout.
    via_sso: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ApiToken(Base):
    """A token for automation, acting with ``role`` for ``team_id`` (``None``: every team).
    ``prefix`` (first 12 characters) tells tokens apart without the secret."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(16))
    team_id: Mapped[int | None] = mapped_column(ForeignKey("team.id", ondelete="CASCADE"))
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class LoginFailure(Base):
    """One refused login: counted per user name and per address for the rate limit."""

    __tablename__ = "login_failure"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(64), index=True)
    address: Mapped[str] = mapped_column(String(64), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
