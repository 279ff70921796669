"""The retention job prunes the access tables: audit events past
``FLEETWATCH_AUDIT_RETENTION_DAYS``, sessions closed (expired, idle, revoked) more than a day
ago, failed logins past the limits' window; everything younger stays. Both backends."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from app.access.models import LoginFailure, User, UserSession
from app.access.roles import Role
from app.audit.models import AuditEvent
from app.db import session_scope, utcnow
from app.retention.jobs import AccessRetention, prune
from tests.access_helpers import add_user
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.live_server import LiveServer

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


def _sessions_of(url: str, name: str, rows: dict[str, UserSession]) -> dict[str, int]:
    """Store ``rows`` as sessions of user ``name``; their ids by label."""
    with session_factory(url) as factory, session_scope(factory) as session:
        user_id = session.scalars(select(User.id).where(User.name == name)).one()
        for row in rows.values():
            row.user_id = user_id
            session.add(row)
        session.flush()
        return {label: row.id for label, row in rows.items()}


def _left(url: str, ids: dict[str, int]) -> set[str]:
    with session_factory(url) as factory, session_scope(factory) as session:
        kept = set(session.scalars(select(UserSession.id).where(UserSession.id.in_(ids.values()))))
    return {label for label, row_id in ids.items() if row_id in kept}


def test_prune_boundaries_are_exact_and_no_open_session_goes(db_url: str) -> None:
    """Each limit to the second: a row exactly at it stays, a second past it goes; every
    session :func:`app.access.sessions.lookup` still accepts stays."""
    now = utcnow()
    day, idle = timedelta(days=1), timedelta(seconds=KEPT.session_idle_s)
    second = timedelta(seconds=1)
    add_user(db_url, "retention-edge", Role.viewer)

    def row(tag: str, *, created: datetime, **fields: datetime | None) -> UserSession:
        values: dict[str, datetime | None] = {"expires_at": now + timedelta(hours=1)}
        values.update(fields)
        return UserSession(
            token_sha256=tag.ljust(64, "e"), created_at=created, address="10.0.0.7", **values
        )

    old = now - 3 * day
    ids = _sessions_of(
        db_url,
        "retention-edge",
        {
            # In use until it expired or was revoked (seen then): closed at that moment.
            "expired-at-limit": row(
                "b1", created=old, expires_at=now - day, last_seen_at=now - day
            ),
            "expired-past": row(
                "b2", created=old, expires_at=now - day - second, last_seen_at=now - day
            ),
            "revoked-at-limit": row(
                "b3", created=old, revoked_at=now - day, last_seen_at=now - day
            ),
            "revoked-past": row(
                "b4", created=old, revoked_at=now - day - second, last_seen_at=now - day
            ),
            "idle-at-limit": row("b5", created=old, last_seen_at=now - day - idle),
            "idle-past": row("b6", created=old, last_seen_at=now - day - idle - second),
            "never-seen-at-limit": row("b7", created=now - day - idle),
            "never-seen-past": row("b8", created=now - day - idle - second),
            # Open: seen a second short of the idle timeout, or opened that long ago.
            "open-seen": row("b9", created=old, last_seen_at=now - idle + second),
            "open-new": row("ba", created=now - idle + second),
            "open-old-login": row(
                "bb", created=now - 2 * day, expires_at=now + second, last_seen_at=now
            ),
        },
    )
    with session_factory(db_url) as factory, session_scope(factory) as session:
        for minutes_s in (900, 901):
            session.add(
                LoginFailure(
                    username="retention-edge",
                    address="10.0.0.7",
                    at=now - timedelta(seconds=minutes_s),
                )
            )
        for days_s in (400 * 86400, 400 * 86400 + 1):
            session.add(
                AuditEvent(
                    at=now - timedelta(seconds=days_s), actor="cli:edge", action=f"edge-{days_s}"
                )
            )
    with session_factory(db_url) as factory, session_scope(factory) as session:
        prune(session, retention_days=30, access=KEPT, now=now)

    assert _left(db_url, ids) == {
        "expired-at-limit",
        "revoked-at-limit",
        "idle-at-limit",
        "never-seen-at-limit",
        "open-seen",
        "open-new",
        "open-old-login",
    }
    with session_factory(db_url) as factory, session_scope(factory) as session:
        # The sessions kept as open are the ones a request still gets in with.
        for label in ("open-seen", "open-new", "open-old-login"):
            open_row = session.get(UserSession, ids[label])
            assert open_row is not None
            assert (now - (open_row.last_seen_at or open_row.created_at)) < idle
            assert open_row.expires_at > now and open_row.revoked_at is None
        failures = session.scalars(
            select(LoginFailure.at).where(LoginFailure.username == "retention-edge")
        ).all()
        events = session.scalars(
            select(AuditEvent.action).where(AuditEvent.actor == "cli:edge")
        ).all()
    assert [round((now - at).total_seconds()) for at in failures] == [900]
    assert events == [f"edge-{400 * 86400}"]


def test_the_scheduled_job_prunes_with_the_servers_settings(db_url: str, tmp_path: Path) -> None:
    """Through the server's own retention job: rows that only these settings (not the
    defaults: 400 days, 8 hours, 900 s) make old enough go, the rest stays."""
    now = utcnow()
    add_user(db_url, "retention-job", Role.viewer)
    day = timedelta(days=1)
    ids = _sessions_of(
        db_url,
        "retention-job",
        {
            # Idle 600 s, closed a day and 100 s ago (kept under the 8-hour default).
            "idle": UserSession(
                token_sha256="c1".ljust(64, "f"),
                created_at=now - 2 * day,
                expires_at=now + day,
                last_seen_at=now - day - timedelta(seconds=700),
                address="10.0.0.6",
            ),
            "open": UserSession(
                token_sha256="c2".ljust(64, "f"),
                created_at=now - day,
                expires_at=now + day,
                last_seen_at=now,
                address="10.0.0.6",
            ),
        },
    )
    with session_factory(db_url) as factory, session_scope(factory) as session:
        for age_s in (120, 5):
            session.add(
                LoginFailure(
                    username="retention-job", address="10.0.0.6", at=now - timedelta(seconds=age_s)
                )
            )
        for days in (3, 1):
            session.add(AuditEvent(at=now - days * day, actor="cli:job", action=f"job-{days}"))
    settings = make_settings(
        db_url,
        tmp_path,
        prune_interval_s=1.0,
        audit_retention_days=2.0,
        session_idle_s=600.0,
        login_failure_window_s=60.0,
    )
    server = LiveServer(settings, run_jobs=True)
    server.start()
    try:
        deadline = time.monotonic() + 60
        while _left(db_url, ids) != {"open"}:
            assert time.monotonic() < deadline, "the retention job did not prune the session"
            time.sleep(0.5)
    finally:
        server.stop()
    with session_factory(db_url) as factory, session_scope(factory) as session:
        failures = session.scalars(
            select(LoginFailure.at).where(LoginFailure.username == "retention-job")
        ).all()
        events = session.scalars(
            select(AuditEvent.action).where(AuditEvent.actor == "cli:job")
        ).all()
    assert [round((now - at).total_seconds()) for at in failures] == [5]
    assert events == ["job-1"]
