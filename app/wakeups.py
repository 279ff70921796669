"""Wake-ups across server processes: a committed change wakes the job that acts on it (the
alert evaluator, the notification worker) instead of leaving it to the job's next timer tick.

- :func:`signal_on_commit` marks a session's transaction; when it commits, every callback
  subscribed to the channel in *this* process runs (:func:`subscribe`) and, on Postgres, a
  ``NOTIFY <channel>`` issued inside the transaction reaches every process that ``LISTEN``\\ s,
  at commit and only if it commits.
- :func:`notify_now` sends a ``NOTIFY`` outside any transaction (a process that is not the
  evaluation leader asking the leader to evaluate).
- :class:`PgListener`: one thread per process on its own psycopg 3 connection, ``LISTEN`` on
  the channels it was given, calling their callbacks; it reconnects after a lost connection.

Wake-ups are hints: every job keeps its timer, so a lost ``NOTIFY`` (listener reconnecting,
SQLite in another process) delays work by one interval at most, never loses it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

import psycopg
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, SessionTransaction

log = logging.getLogger(__name__)

#: Postgres channel of "a batch with an event or state change was stored: evaluate".
ALERTS_CHANNEL = "fleetwatch_alerts"
#: Postgres channel of "notification rows were queued: deliver".
OUTBOX_CHANNEL = "fleetwatch_outbox"
#: Postgres channel of "a batch was stored by a process without the jobs: refresh health"
#: (``fleetwatch serve --no-jobs`` beside ``fleetwatch worker``).
INGEST_CHANNEL = "fleetwatch_ingest"
#: Scheduler actions were logged (:mod:`app.remediation`): run them.
ACTIONS_CHANNEL = "fleetwatch_actions"

_INFO_KEY = "fleetwatch_wake_channels"
_subscribers: dict[str, list[Callable[[], None]]] = {}
_subscribers_lock = threading.Lock()


def subscribe(channel: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` (no arguments, must not block) after each commit in this process
    that signalled ``channel``."""
    with _subscribers_lock:
        _subscribers.setdefault(channel, []).append(callback)


def unsubscribe(channel: str, callback: Callable[[], None]) -> None:
    """Undo :func:`subscribe` (no error when it was not subscribed)."""
    with _subscribers_lock:
        callbacks = _subscribers.get(channel, [])
        if callback in callbacks:
            callbacks.remove(callback)


def _fire(channel: str) -> None:
    with _subscribers_lock:
        callbacks = list(_subscribers.get(channel, ()))
    for callback in callbacks:
        try:
            callback()
        except Exception:  # a wake-up is a hint; the committing request must not fail on it
            log.exception("wake-up callback of %s failed", channel)


def signal_on_commit(session: Session, channel: str, payload: str = "") -> None:
    """Wake ``channel``'s subscribers when the session's transaction commits (nothing on
    rollback). On Postgres also ``pg_notify(channel, payload)`` in the transaction, so other
    processes hear it at the same commit (with ``payload``; subscribers in this process are
    called without it)."""
    conn = session.connection()  # a transaction is open, so its rollback clears the mark
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": channel, "p": payload})
    session.info.setdefault(_INFO_KEY, set()).add(channel)


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    for channel in session.info.pop(_INFO_KEY, ()):
        _fire(channel)


@event.listens_for(Session, "after_soft_rollback")
def _after_rollback(session: Session, previous_transaction: SessionTransaction) -> None:
    # Only the outermost transaction's rollback: after a savepoint's, the transaction (and the
    # rows an earlier savepoint queued) goes on; at worst a job wakes and finds nothing new.
    if previous_transaction.parent is None:
        session.info.pop(_INFO_KEY, None)


def notify_now(engine: Engine, channel: str, payload: str = "") -> None:
    """``NOTIFY channel, payload`` at once (autocommit); Postgres only. Errors propagate."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": channel, "p": payload})


def libpq_url(engine: Engine) -> str:
    """The engine's URL as psycopg wants it (no ``+psycopg`` driver part), password included."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class PgListener:
    """A daemon thread ``LISTEN``\\ ing on ``callbacks``' channels on its own connection and
    calling each channel's callback with each notification's payload (also this process's
    own; an empty payload after a reconnect, when notifications may have been missed).

    ``retry_s``: seconds between reconnection attempts after the connection is lost.
    """

    def __init__(
        self, conninfo: str, callbacks: Mapping[str, Callable[[str], None]], *, retry_s: float = 2.0
    ) -> None:
        self.conninfo = conninfo
        self.callbacks = dict(callbacks)
        self.retry_s = retry_s
        self.listening = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; :attr:`listening` is set once ``LISTEN`` is in place."""
        self._thread = threading.Thread(target=self._loop, name="pg-listen", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    for channel in self.callbacks:
                        conn.execute(f'LISTEN "{channel}"')
                    self.listening.set()
                    # Every channel wakes at once after a reconnect: a notification sent while
                    # the connection was down is gone.
                    for callback in self.callbacks.values():
                        callback("")
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.5):
                            heard = self.callbacks.get(note.channel)
                            if heard is not None:
                                heard(note.payload)
            except Exception:
                if self._stop.is_set():
                    return
                self.listening.clear()
                log.warning("LISTEN connection lost; reconnecting in %.0f s", self.retry_s)
                self._stop.wait(self.retry_s)

    def close(self) -> None:
        """Stop the thread (within about half a second)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
