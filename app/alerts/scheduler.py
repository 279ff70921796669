"""The scheduled evaluation: one APScheduler job per server process, of which exactly one
evaluates when several share a Postgres database.

Leadership is a session-level ``pg_try_advisory_lock`` held on a dedicated connection: the
process holding it evaluates; if that process dies its connection closes, Postgres releases the
lock, and another process takes it at its next tick. Each evaluation also runs under
``pg_advisory_xact_lock`` of a second key, so even a leader that lost its connection mid-run
and a new leader can never write the same transitions twice. SQLite is one process: it
evaluates.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from app.alerts.evaluator import EvaluationReport, evaluate
from app.db import make_session_factory, session_scope, utcnow
from app.health.rules import HealthRules

log = logging.getLogger(__name__)

#: Advisory lock keys ("fleetwatch alerts" leader and per-evaluation), arbitrary but fixed.
LEADER_KEY = 0x466C5741_4C454144 & 0x7FFFFFFFFFFFFFFF
EVAL_KEY = 0x466C5741_4556414C & 0x7FFFFFFFFFFFFFFF


class AlertEvaluator:
    """Runs :func:`~app.alerts.evaluator.evaluate` when this process is the leader."""

    def __init__(
        self, engine: Engine, factory: sessionmaker[Session], *, health_rules: HealthRules
    ) -> None:
        self.engine = engine
        self.factory = factory
        self.read_factory = make_session_factory(engine, read_only=True)
        self.health_rules = health_rules
        self.postgres = engine.dialect.name == "postgresql"
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self.last_report: EvaluationReport | None = None

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

    def run_once(self, *, now: datetime | None = None) -> EvaluationReport | None:
        """One tick: evaluate if leader (returns the report), else None."""
        with self._lock:
            if not self._lead():
                return None
            now = now or utcnow()
            with session_scope(self.factory) as session:
                if self.postgres:
                    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": EVAL_KEY})
                    report = evaluate(session, now=now, health_rules=self.health_rules)
                else:
                    with session_scope(self.read_factory) as reader:
                        report = evaluate(
                            session, now=now, health_rules=self.health_rules, read_session=reader
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

    def close(self) -> None:
        """Give up leadership (another process takes over at its next tick)."""
        with self._lock:
            self._release()
