"""The idle timeout of a login session (:func:`app.access.sessions.lookup`): a session in use
stays open whatever the timeout (its last request is recorded coarsely: at most once a
minute, or a tenth of a shorter timeout), one left alone ends at the timeout. Both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.access import sessions
from app.access.models import User, UserSession
from app.access.roles import Role
from app.access.secrets import digest
from app.db import session_scope
from tests.access_helpers import add_user
from tests.dbs import session_factory


@pytest.mark.parametrize(("idle_s", "every_s"), [(60.0, 59.0), (60.0, 30.0), (600.0, 59.0)])
def test_a_session_in_use_stays_open_and_one_left_alone_ends(
    db_url: str, idle_s: float, every_s: float
) -> None:
    name = f"idle-{int(idle_s)}-{int(every_s)}"
    add_user(db_url, name, Role.viewer)
    with session_factory(db_url) as factory:
        with session_scope(factory) as session:
            user = session.scalars(select(User).where(User.name == name)).one()
            token = sessions.open_session(session, user, address="10.0.0.5", ttl_s=86400)
            opened = session.scalars(
                select(UserSession.created_at).where(UserSession.token_sha256 == digest(token))
            ).one()
        # A request every ``every_s`` for 10 timeouts: each gets in.
        at = opened
        for _ in range(int(10 * idle_s / every_s)):
            at += timedelta(seconds=every_s)
            with session_scope(factory) as session:
                assert sessions.lookup(session, token, idle_s=idle_s, now=at) is not None, at
        with session_scope(factory) as session:
            seen = session.scalars(
                select(UserSession.last_seen_at).where(UserSession.token_sha256 == digest(token))
            ).one()
        assert seen is not None and (at - seen).total_seconds() < min(60.0, idle_s / 10) + every_s
        # Then nothing for the timeout: ended.
        with session_scope(factory) as session:
            later = seen + timedelta(seconds=idle_s)
            assert sessions.lookup(session, token, idle_s=idle_s, now=later) is None
