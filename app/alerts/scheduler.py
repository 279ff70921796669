"""The scheduled evaluation: one APScheduler job per server process, of which exactly one
evaluates when several share a Postgres database.

Leadership is a session-level ``pg_try_advisory_lock`` held on a dedicated connection: the
process holding it evaluates; if that process dies its connection closes, Postgres releases the
lock, and another process takes it at its next tick. Each evaluation also runs under
``pg_advisory_xact_lock`` of its lane's key, so even a leader that lost its connection mid-run
and a new leader can never write the same transitions twice. SQLite is one process: it
evaluates.

The rules fall into two **lanes** (:data:`LANES`), disjoint, each with its own transaction
lock: the event-driven rules and the rest (windowed thresholds, rates, absence, drift). A tick
runs both, one transaction each; a wake-up runs the event-driven lane alone. So a page for a
lost GPU never waits behind a pass over 500 windowed rules on 8,000 GPUs (seconds at fleet
scale), and the two lanes never write the same instance. On SQLite (one writer) the lanes take
turns.

Between ticks, :meth:`AlertEvaluator.wake` (after a batch with an event or a GPU state change
is stored, or the stored health changed) runs the event-driven rules
(:func:`app.alerts.triggers.is_event_driven`) after ``debounce_s``, so a burst of batches is
evaluated once, for the nodes the wake-ups named (merged; see
:func:`app.alerts.evaluator.evaluate`'s ``nodes``). A process that is not the leader passes
the wake-up on with ``NOTIFY`` on :data:`app.wakeups.ALERTS_CHANNEL` (payload
:func:`app.alerts.triggers.wake_payload`), which the leader's
:class:`app.wakeups.PgListener` turns into :meth:`AlertEvaluator.wake_from_peer`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from app.alerts.evaluator import EvaluationReport, evaluate
from app.alerts.instance_reads import ActiveInstanceCache
from app.alerts.spec import RuleSpec
from app.alerts.triggers import MAX_WAKE_NODES, is_event_driven, parse_wake_payload, wake_payload
from app.db import make_session_factory, session_scope, utcnow
from app.exporter import counters
from app.health.rules import HealthRules
from app.series.recent_gpu import RecentGpuSamples
from app.wakeups import ALERTS_CHANNEL, notify_now

log = logging.getLogger(__name__)

#: Advisory lock keys ("fleetwatch alerts" leader and per-evaluation of each lane), arbitrary
#: but fixed.
LEADER_KEY = 0x466C5741_4C454144 & 0x7FFFFFFFFFFFFFFF
EVAL_KEY = 0x466C5741_4556414C & 0x7FFFFFFFFFFFFFFF
EVAL_TIMER_KEY = 0x466C5741_54494D45 & 0x7FFFFFFFFFFFFFFF


def _timer_only(spec: RuleSpec) -> bool:
    return not is_event_driven(spec)


#: Lane name → (its transaction lock key, the rules it evaluates). Together they hold every
#: rule exactly once.
LANES: dict[str, tuple[int, Callable[[RuleSpec], bool]]] = {
    "event": (EVAL_KEY, is_event_driven),
    "timer": (EVAL_TIMER_KEY, _timer_only),
}


class AlertEvaluator:
    """Runs :func:`~app.alerts.evaluator.evaluate` when this process is the leader."""

    def __init__(
        self,
        engine: Engine,
        factory: sessionmaker[Session],
        *,
        health_rules: HealthRules,
        debounce_s: float = 0.1,
    ) -> None:
        self.engine = engine
        self.factory = factory
        self.read_factory = make_session_factory(engine, read_only=True)
        self.health_rules = health_rules
        self.postgres = engine.dialect.name == "postgresql"
        self._conn: Connection | None = None
        self._lead_lock = threading.Lock()
        # One lock per lane on Postgres (a wake-up runs beside a long timer pass); one for
        # both on SQLite, which has one writer.
        shared = threading.Lock()
        self._lane_locks = {lane: (threading.Lock() if self.postgres else shared) for lane in LANES}
        self.last_report: EvaluationReport | None = None
        # The timer lane's GPU samples between ticks; it reads the arrival feed only while
        # this process leads (Postgres), and starts over whenever it becomes leader again.
        self.recent_gpu = RecentGpuSamples(consume_feed=self.postgres)
        # Each lane's active instances between its passes (read only under its lane lock).
        self.instances = {lane: ActiveInstanceCache() for lane in LANES}
        self.debounce_s = debounce_s
        self._woken = threading.Event()
        self._woken_here = False
        # The nodes the pending wake-ups named; None once one named none (the whole fleet).
        self._wake_lock = threading.Lock()
        self._wake_nodes: set[int] | None = set()
        self._wake_here_nodes: set[int] | None = set()
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
        self.recent_gpu.reset()  # another leader may have taken the feed meanwhile
        for cache in self.instances.values():
            cache.reset()
        return True

    def _release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken; closing is best effort
                log.debug("closing the alert leader connection failed", exc_info=True)
            self._conn = None

    def run_once(
        self,
        *,
        now: datetime | None = None,
        lane: str | None = None,
        nodes: Collection[int] | None = None,
    ) -> EvaluationReport | None:
        """One tick if this process leads: the ``lane`` named (see :data:`LANES`), or every
        lane one after the other, each in its own transaction; returns the report (lanes
        summed), else None. ``nodes``: evaluate those nodes only (a wake-up's; see
        :func:`~app.alerts.evaluator.evaluate`).

        Raises:
            KeyError: no such lane.
        """
        lanes = list(LANES) if lane is None else [lane]
        total: EvaluationReport | None = None
        for name in lanes:
            report = self._run_lane(name, now, nodes)
            if report is None:
                return None
            total = report if total is None else _sum(total, report)
        self.last_report = total
        return total

    def _run_lane(
        self, lane: str, now: datetime | None, nodes: Collection[int] | None
    ) -> EvaluationReport | None:
        key, only = LANES[lane]
        with self._lane_locks[lane]:
            with self._lead_lock:
                if not self._lead():
                    return None
            at = now or utcnow()
            with session_scope(self.factory) as session:
                if self.postgres:
                    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
                    report = evaluate(
                        session,
                        now=at,
                        health_rules=self.health_rules,
                        only=only,
                        nodes=nodes,
                        recent_gpu=self._recent_for(lane, nodes),
                        instances=self.instances[lane],
                    )
                else:
                    with session_scope(self.read_factory) as reader:
                        report = evaluate(
                            session,
                            now=at,
                            health_rules=self.health_rules,
                            read_session=reader,
                            only=only,
                            nodes=nodes,
                            recent_gpu=self._recent_for(lane, nodes),
                        )
        # Counted once committed: an evaluation whose transaction failed raised instead.
        counters.rules_evaluated(lane=lane, seconds=report.duration_s, failed=len(report.failed))
        return report

    def _recent_for(self, lane: str, nodes: Collection[int] | None) -> RecentGpuSamples | None:
        """The kept GPU samples for a whole-fleet pass of the timer lane (the windowed
        rules), else None."""
        return self.recent_gpu if lane == "timer" and nodes is None else None

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

    def wake(self, node_ids: Iterable[int] | None = None) -> None:
        """A change was committed in this process: evaluate the event-driven rules after the
        debounce (the leader), or ask the leader to (``NOTIFY``). ``node_ids``: the nodes whose
        data changed; the woken evaluation reads and steps only those (None: every node).
        Never blocks."""
        with self._wake_lock:
            self._wake_nodes = _merged(self._wake_nodes, node_ids)
            self._wake_here_nodes = _merged(self._wake_here_nodes, node_ids)
            self._woken_here = True
        self._woken.set()

    def wake_from_peer(self, payload: str = "") -> None:
        """A ``NOTIFY`` arrived (its payload from :func:`wake_payload`: the nodes, or empty
        for every node): evaluate after the debounce if this process leads; never passed on
        again (processes that do not lead would echo it to each other)."""
        with self._wake_lock:
            self._wake_nodes = _merged(self._wake_nodes, parse_wake_payload(payload))
        self._woken.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._woken.wait()
            self._stop.wait(self.debounce_s)
            if self._stop.is_set():
                return
            with self._wake_lock:
                self._woken.clear()
                here, self._woken_here = self._woken_here, False
                nodes, self._wake_nodes = self._wake_nodes, set()
                here_nodes, self._wake_here_nodes = self._wake_here_nodes, set()
            try:
                report = self.run_once(lane="event", nodes=nodes)
                if report is None and here and self.postgres:
                    notify_now(self.engine, ALERTS_CHANNEL, wake_payload(here_nodes))
                elif report is not None and (report.transitions or report.failed):
                    log.info(
                        "alert evaluation (woken, %s): %d rules, %d transitions, %.3f s",
                        "every node" if nodes is None else f"{len(nodes)} node(s)",
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
        for lock in set(self._lane_locks.values()):
            lock.acquire()
        try:
            with self._lead_lock:
                self._release()
        finally:
            for lock in set(self._lane_locks.values()):
                lock.release()


def _merged(pending: set[int] | None, node_ids: Iterable[int] | None) -> set[int] | None:
    if pending is None or node_ids is None:
        return None
    merged = pending | set(node_ids)
    return None if len(merged) > MAX_WAKE_NODES else merged


def _sum(a: EvaluationReport, b: EvaluationReport) -> EvaluationReport:
    """Two lanes' reports as one: rules, failures and transitions added, durations too."""
    return EvaluationReport(
        rules=a.rules + b.rules,
        failed={**a.failed, **b.failed},
        transitions=a.transitions + b.transitions,
        duration_s=a.duration_s + b.duration_s,
    )
