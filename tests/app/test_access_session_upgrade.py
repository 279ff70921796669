"""Revision 0035 on a database with open login sessions: a session opened before the upgrade
and in use since does not end at the upgrade for having no last request recorded (it counts
as seen at the upgrade); the idle timeout runs from there. Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, text

from app.access import sessions
from app.access.models import UserSession
from app.access.secrets import digest
from app.db import make_engine, make_session_factory, session_scope, utcnow
from app.migrate import upgrade
from tests.dbs import database_at

IDLE_S = 8 * 3600.0


@pytest.fixture(params=["postgres", "sqlite"])
def at_0034(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of either backend at revision 0034."""
    with database_at(request.param, "0034", tmp_path) as url:
        yield url


def _stamp(url: str, value: datetime) -> object:
    """``value`` as this backend's timestamp column takes it (SQLite: naive UTC)."""
    return value.replace(tzinfo=None) if url.startswith("sqlite") else value


def test_sessions_open_at_the_upgrade_count_as_seen_then(at_0034: str) -> None:
    now = utcnow()
    engine = make_engine(at_0034)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO app_user (id, name, role, active, created_at) "
                    "VALUES (1, 'upgraded', 'viewer', true, :at)"
                ),
                {"at": _stamp(at_0034, now - timedelta(days=1))},
            )
            # Opened 9 hours ago (beyond the 8-hour idle timeout), 3 hours left; revoked.
            for token, revoked in (("fws_open", None), ("fws_revoked", now - timedelta(hours=1))):
                conn.execute(
                    text(
                        "INSERT INTO user_session (user_id, token_sha256, created_at, expires_at,"
                        " revoked_at) VALUES (1, :digest, :created, :expires, :revoked)"
                    ),
                    {
                        "digest": digest(token),
                        "created": _stamp(at_0034, now - timedelta(hours=9)),
                        "expires": _stamp(at_0034, now + timedelta(hours=3)),
                        "revoked": None if revoked is None else _stamp(at_0034, revoked),
                    },
                )
        upgrade(at_0034)
        factory = make_session_factory(engine)
        with session_scope(factory) as session:
            seen = dict(
                session.execute(select(UserSession.token_sha256, UserSession.last_seen_at)).all()
            )
            assert seen[digest("fws_revoked")] is None
            marked = seen[digest("fws_open")]
            assert isinstance(marked, datetime) and marked.tzinfo == UTC
            assert abs((marked - utcnow()).total_seconds()) < 120
            user = sessions.lookup(session, "fws_open", idle_s=IDLE_S)
            assert user is not None and user.name == "upgraded"
        # The idle timeout runs from the upgrade.
        with session_scope(factory) as session:
            later = marked + timedelta(seconds=IDLE_S)
            assert sessions.lookup(session, "fws_open", idle_s=IDLE_S, now=later) is None
    finally:
        engine.dispose()
