"""The retention job prunes the access tables: audit events past
``FLEETWATCH_AUDIT_RETENTION_DAYS``, sessions closed (expired, idle, revoked) more than a day
ago, failed logins past the limits' window; everything younger stays. Both backends."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from app.access.models import LoginFailure, User, UserSession
from app.access.roles import Role
from app.audit.models import AuditEvent
from app.db import session_scope, utcnow
from app.retention.jobs import AccessRetention, prune
from tests.access_helpers import add_user
from tests.dbs import session_factory

KEPT = AccessRetention(audit_retention_days=400, session_idle_s=3600, login_failure_window_s=900)


def test_prune_deletes_closed_sessions_old_failures_and_audit_events_only(db_url: str) -> None:
    now = utcnow()
    add_user(db_url, "retention-user", Role.viewer)

    def session_row(tag: str, *, age: timedelta, **fields: datetime | None) -> UserSession:
        created = now - age
        values: dict[str, datetime | None] = {"expires_at": now + timedelta(hours=1)}
        values.update(fields)
        return UserSession(
            token_sha256=tag.ljust(64, "0"), created_at=created, address="127.0.0.1", **values
        )

    sessions = {
        "open": session_row("a1", age=timedelta(hours=2), last_seen_at=now - timedelta(minutes=5)),
        "expired-2d": session_row("a2", age=timedelta(days=3), expires_at=now - timedelta(days=2)),
        "expired-1h": session_row(
            "a3", age=timedelta(hours=13), expires_at=now - timedelta(hours=1)
        ),
        "revoked-2d": session_row("a4", age=timedelta(days=2), revoked_at=now - timedelta(days=2)),
        "revoked-1h": session_row(
            "a5", age=timedelta(hours=3), revoked_at=now - timedelta(hours=1)
        ),
        # Idle since 2 days (never seen since its login): closed a day and 23 hours ago.
        "idle-2d": session_row("a6", age=timedelta(days=2)),
        # Idle timeout (1 h) passed 12 hours ago: closed, but not a day ago yet.
        "idle-13h": session_row(
            "a7", age=timedelta(hours=20), last_seen_at=now - timedelta(hours=13)
        ),
    }
    with session_factory(db_url) as factory, session_scope(factory) as session:
        user_id = session.scalars(select(User.id).where(User.name == "retention-user")).one()
        for row in sessions.values():
            row.user_id = user_id
            session.add(row)
        for minutes in (1, 14, 16, 600):
            session.add(
                LoginFailure(
                    username="retention-user",
                    address="10.0.0.9",
                    at=now - timedelta(minutes=minutes),
                )
            )
        for days in (1, 399, 401, 800):
            session.add(
                AuditEvent(at=now - timedelta(days=days), actor="cli:test", action=f"kept-{days}")
            )
        session.flush()
        ids = {name: row.id for name, row in sessions.items()}

    with session_factory(db_url) as factory, session_scope(factory) as session:
        deleted = prune(session, retention_days=30, access=KEPT, now=now)

    with session_factory(db_url) as factory, session_scope(factory) as session:
        left = set(session.scalars(select(UserSession.id).where(UserSession.user_id == user_id)))
        failures = sorted(
            round((now - at).total_seconds() / 60)
            for at in session.scalars(
                select(LoginFailure.at).where(LoginFailure.address == "10.0.0.9")
            )
        )
        actions = sorted(
            session.scalars(select(AuditEvent.action).where(AuditEvent.actor == "cli:test"))
        )
    assert left == {ids[n] for n in ("open", "expired-1h", "revoked-1h", "idle-13h")}
    assert failures == [1, 14]
    assert actions == ["kept-1", "kept-399"]
    assert deleted["user_session"] >= 3 and deleted["login_failure"] >= 2
    assert deleted["audit_event"] >= 2


def test_prune_without_access_retention_leaves_the_access_tables(db_url: str) -> None:
    now = utcnow()
    with session_factory(db_url) as factory, session_scope(factory) as session:
        session.add(AuditEvent(at=now - timedelta(days=4000), actor="cli:test", action="ancient"))
        session.add(LoginFailure(username="x", address="10.0.0.8", at=now - timedelta(days=9)))
    with session_factory(db_url) as factory, session_scope(factory) as session:
        deleted = prune(session, retention_days=30, now=now)
        assert "audit_event" not in deleted and "login_failure" not in deleted
        assert session.scalars(
            select(AuditEvent.action).where(AuditEvent.actor == "cli:test")
        ).all() == ["ancient"]
