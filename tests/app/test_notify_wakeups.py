"""The delivery worker is woken by the commit of outbox rows: the in-process signal fires after
the commit (never before it, never for a rollback), and on Postgres the ``NOTIFY`` sent in the
same transaction reaches a listener only when it commits. Routes of critical alerts only wait
0 s for company unless they say otherwise."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app import wakeups
from app.db import make_engine, make_session_factory, session_scope
from app.notify import service as notify_service
from app.notify.models import NotifyDelivery
from app.notify.schemas import ChannelIn, RouteIn
from app.notify.secrets import SecretBox
from tests.conftest import make_settings
from tests.notify_helpers import Alerts, wipe_notify


@pytest.fixture
def alerts(db_url: str, tmp_path: Path) -> Iterator[Alerts]:
    """An :class:`Alerts` writer on ``db_url`` with one webhook channel and catch-all route."""
    wipe_notify(db_url)
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    settings = make_settings(db_url, tmp_path)
    with session_scope(factory) as session:
        channel = notify_service.create_channel(
            session,
            data=ChannelIn(name="ops", kind="webhook", url="http://127.0.0.1:9/hook"),
            box=SecretBox.from_settings(settings),
            allow_hosts=["127.0.0.1"],
        )
        notify_service.create_route(session, data=RouteIn(channel_id=channel.id))
    yield Alerts(factory)
    wipe_notify(db_url)
    engine.dispose()


class Woken:
    """A subscriber that records how many outbox rows were committed when it was called."""

    def __init__(self, alerts: Alerts) -> None:
        self.alerts = alerts
        self.rows_seen: list[int] = []
        self.event = threading.Event()

    def __call__(self) -> None:
        with session_scope(self.alerts.factory) as session:
            self.rows_seen.append(int(session.scalar(select(func.count(NotifyDelivery.id))) or 0))
        self.event.set()


def test_the_in_process_signal_fires_after_the_outbox_commit(alerts: Alerts) -> None:
    woken = Woken(alerts)
    wakeups.subscribe(wakeups.OUTBOX_CHANNEL, woken)
    try:
        alerts.transition("gpu-lost", "node-a", "firing")
    finally:
        wakeups.unsubscribe(wakeups.OUTBOX_CHANNEL, woken)

    assert woken.rows_seen == [1]  # called once, and the row was already visible


def test_a_rolled_back_outbox_write_wakes_nobody(alerts: Alerts) -> None:
    woken = Woken(alerts)
    wakeups.subscribe(wakeups.OUTBOX_CHANNEL, woken)
    try:
        with alerts.factory() as session:
            wakeups.signal_on_commit(session, wakeups.OUTBOX_CHANNEL)
            session.rollback()
            session.commit()  # a later, empty commit of the same session
    finally:
        wakeups.unsubscribe(wakeups.OUTBOX_CHANNEL, woken)

    assert woken.rows_seen == []


def test_a_savepoint_rolled_back_after_the_outbox_write_keeps_the_wake_up(alerts: Alerts) -> None:
    woken = Woken(alerts)
    wakeups.subscribe(wakeups.OUTBOX_CHANNEL, woken)
    try:
        with session_scope(alerts.factory) as session:
            wakeups.signal_on_commit(session, wakeups.OUTBOX_CHANNEL)
            with pytest.raises(ValueError), session.begin_nested():
                raise ValueError("one rule failed; the others' rows stay queued")
    finally:
        wakeups.unsubscribe(wakeups.OUTBOX_CHANNEL, woken)

    assert woken.rows_seen == [0]


def test_a_postgres_listener_hears_the_commit_and_not_the_rollback(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    factory = make_session_factory(engine)
    heard = threading.Event()
    payloads: list[str] = []

    def hear(payload: str) -> None:
        payloads.append(payload)
        heard.set()

    listener = wakeups.PgListener(wakeups.libpq_url(engine), {wakeups.OUTBOX_CHANNEL: hear})
    listener.start()
    try:
        assert listener.listening.wait(10)
        assert heard.wait(5)  # the wake-up every channel gets after (re)connecting
        assert payloads == [""]
        heard.clear()
        with factory() as session:
            wakeups.signal_on_commit(session, wakeups.OUTBOX_CHANNEL, "rolled-back")
            session.rollback()
        assert not heard.wait(1.5)

        with session_scope(factory) as session:
            wakeups.signal_on_commit(session, wakeups.OUTBOX_CHANNEL, "nodes:7")

        assert heard.wait(5)
        assert payloads == ["", "nodes:7"]
    finally:
        listener.close()
        engine.dispose()
