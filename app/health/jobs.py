"""The refresh of the stored health (:mod:`app.health.state`) in each server process: a thread
that refreshes every ``interval_s``, or sooner when woken (the ingest router wakes it after a
batch is committed), at most once per ``debounce_s`` so a burst of batches is evaluated
together.

Several processes on one Postgres: each refresh runs under ``pg_try_advisory_xact_lock``, so one
process evaluates at a time and the others skip that round (their batches are found by the
next refresh, whoever runs it: a node is due when its ``last_seen_at`` moved).
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.health import state
from app.health.rules import HealthRules

log = logging.getLogger(__name__)

#: Advisory lock key of one refresh ("fleetwatch health"), arbitrary but fixed.
REFRESH_KEY = 0x466C5748_45414C54 & 0x7FFFFFFFFFFFFFFF


class HealthRefresher:
    """Runs :func:`app.health.state.refresh` on a timer and on :meth:`wake`."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        rules: HealthRules,
        interval_s: float,
        recheck_after_s: float,
        debounce_s: float = 0.2,
    ) -> None:
        self.factory = factory
        self.rules = rules
        self.interval_s = interval_s
        self.recheck_after_s = recheck_after_s
        self.debounce_s = debounce_s
        self.last_report: state.RefreshReport | None = None
        self._woken = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> state.RefreshReport | None:
        """One refresh; None when another process holds the refresh lock."""
        with session_scope(self.factory) as session:
            if session.get_bind().dialect.name == "postgresql":
                got = session.scalar(
                    text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": REFRESH_KEY}
                )
                if not got:
                    return None
            report = state.refresh(
                session, rules=self.rules, now=utcnow(), recheck_after_s=self.recheck_after_s
            )
        self.last_report = report
        return report

    def wake(self) -> None:
        """Refresh soon (after the debounce) instead of at the next interval."""
        self._woken.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._woken.wait(timeout=self.interval_s):
                self._stop.wait(self.debounce_s)
            self._woken.clear()
            if self._stop.is_set():
                break
            try:
                report = self.run_once()
                if report is not None and report.changed:
                    log.debug(
                        "health refresh: %d nodes evaluated, %d changed, %.3f s",
                        report.evaluated,
                        report.changed,
                        report.duration_s,
                    )
            except Exception:
                log.exception("health refresh failed")
                self._stop.wait(self.interval_s)

    def start(self) -> None:
        """Start the thread (a daemon: it never holds the process open)."""
        self._thread = threading.Thread(target=self._loop, name="health-refresh", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread and wait for the refresh in progress."""
        self._stop.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
