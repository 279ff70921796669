"""The scheduled evaluation: one APScheduler job per server process, of which exactly one
evaluates when several share a Postgres database.

Leadership is a session-level ``pg_try_advisory_lock`` held on a dedicated connection: the
process holding it evaluates; if that process dies its connection closes, Postgres releases the
lock, and another process takes it at its next tick. Each evaluation also runs under
``pg_advisory_xact_lock`` of a second key, so even a leader that lost its connection mid-run
and a new leader can never write the same transitions twice. SQLite is one process: it
evaluates.

Between ticks, :meth:`AlertEvaluator.wake` (after a batch with an event or a GPU state change
is stored, or the stored health changed) runs the event-driven rules
(:func:`app.alerts.triggers.is_event_driven`) after ``debounce_s``, so a burst of batches is
evaluated once. A process that is not the leader passes the wake-up on with ``NOTIFY`` on
:data:`app.wakeups.ALERTS_CHANNEL`, which the leader's :class:`app.wakeups.PgListener` turns
into :meth:`AlertEvaluator.wake_from_peer`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from app.alerts.evaluator import EvaluationReport, evaluate
from app.alerts.spec import RuleSpec
from app.alerts.triggers import is_event_driven
from app.db import make_session_factory, session_scope, utcnow
from app.health.rules import HealthRules
from app.wakeups import ALERTS_CHANNEL, notify_now

log = logging.getLogger(__name__)

#: Advisory lock keys ("fleetwatch alerts" leader and per-evaluation), arbitrary but fixed.
LEADER_KEY = 0x466C5741_4C454144 & 0x7FFFFFFFFFFFFFFF
EVAL_KEY = 0x466C5741_4556414C & 0x7FFFFFFFFFFFFFFF


class AlertEvaluator:
    """Runs :func:`~app.alerts.evaluator.evaluate` when this process is the leader."""

    def __init__(
        self,
        engine: Engine,
        factory: sessionmaker[Session],
        *,
        health_rules: HealthRules,
        debounce_s: float = 0.3,
    ) -> None:
        self.engine = engine
        self.factory = factory
        self.read_factory = make_session_factory(engine, read_only=True)
        self.health_rules = health_rules
        self.postgres = engine.dialect.name == "postgresql"
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self.last_report: EvaluationReport | None = None
        self.debounce_s = debounce_s
        self._woken = threading.Event()
        self._woken_here = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        """Whether this process holds the leader lock (always True on SQLite)."""
        return not self.postgres or self._conn is not None

    def _lead(self) -> bool:
        if not self.postgres:
            return True
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return True
            except Exception:
                log.warning("alert leader connection lost; trying to lead again")
                self._release()
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = bool(conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_KEY}))
        except Exception:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        log.info("this process now evaluates alert rules")
        self._conn = conn
        return True

    def _release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken; closing is best effort
                log.debug("closing the alert leader connection failed", exc_info=True)
            self._conn = None

    def run_once(
        self, *, now: datetime | None = None, only: Callable[[RuleSpec], bool] | None = None
    ) -> EvaluationReport | None:
        """One tick: evaluate (every rule, or those ``only`` accepts) if leader (returns the
        report), else None."""
        with self._lock:
            if not self._lead():
                return None
            now = now or utcnow()
            with session_scope(self.factory) as session:
                if self.postgres:
                    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": EVAL_KEY})
                    report = evaluate(session, now=now, health_rules=self.health_rules, only=only)
                else:
                    with session_scope(self.read_factory) as reader:
                        report = evaluate(
                            session,
                            now=now,
                            health_rules=self.health_rules,
                            read_session=reader,
                            only=only,
                        )
            self.last_report = report
            return report

    def job(self) -> None:
        """Scheduler wrapper: errors are logged, never raised into the scheduler."""
        try:
            report = self.run_once()
            if report is not None and (report.transitions or report.failed):
                log.info(
                    "alert evaluation: %d rules, %d transitions, %d failed, %.3f s",
                    report.rules,
                    report.transitions,
                    len(report.failed),
                    report.duration_s,
                )
        except Exception:
            log.exception("alert evaluation failed")

    def wake(self) -> None:
        """A change was committed in this process: evaluate the event-driven rules after the
        debounce (the leader), or ask the leader to (``NOTIFY``). Never blocks."""
        self._woken_here = True
        self._woken.set()

    def wake_from_peer(self) -> None:
        """A ``NOTIFY`` arrived: evaluate after the debounce if this process leads; never
        passed on again (processes that do not lead would echo it to each other)."""
        self._woken.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._woken.wait()
            self._stop.wait(self.debounce_s)
            if self._stop.is_set():
                return
            self._woken.clear()
            here, self._woken_here = self._woken_here, False
            try:
                report = self.run_once(only=is_event_driven)
                if report is None and here and self.postgres:
                    notify_now(self.engine, ALERTS_CHANNEL)
                elif report is not None and (report.transitions or report.failed):
                    log.info(
                        "alert evaluation (woken): %d rules, %d transitions, %.3f s",
                        report.rules,
                        report.transitions,
                        report.duration_s,
                    )
            except Exception:
                log.exception("woken alert evaluation failed")

    def start(self) -> None:
        """Start the thread that serves :meth:`wake` (a daemon)."""
        self._thread = threading.Thread(target=self._loop, name="alert-wake", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the wake-up thread and give up leadership (another process takes over at its
        next tick)."""
        self._stop.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            self._release()
