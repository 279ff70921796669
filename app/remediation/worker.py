"""Runs the pending actions of the log (:mod:`app.remediation.service`), oldest first.

Each due action is claimed under a row lock (``FOR UPDATE SKIP LOCKED`` on Postgres, so two
processes never run one action twice), run without a shell, and its exit status and output
written back in the same transaction. A failed run (non-zero exit, no answer within the
timeout, command not found) is retried after ``BACKOFF_S[attempt]`` until ``MAX_ATTEMPTS``,
then marked ``failed``: never dropped, shown on the node page and in the API. Actions of one
node run in the order they were asked for: one waits while an earlier one of its node is
pending.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.remediation import commands, kubernetes, service
from app.remediation.models import NodeAction

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
#: Wait before the retry after attempt n (1-based): 10 s, 30 s, 1 min, 5 min.
BACKOFF_S = (10.0, 30.0, 60.0, 300.0)


@dataclass
class RunReport:
    """What one :meth:`ActionWorker.run_once` did."""

    succeeded: int = 0
    retried: int = 0
    failed: int = 0


class ActionWorker:
    """Runs due actions; :meth:`wake` asks for a run now (from a commit that logged one)."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        *,
        timeout_s: float = 30.0,
        kubeconfig: str | None = None,
    ) -> None:
        self.factory = factory
        self.timeout_s = timeout_s
        self.kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self._woken = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, *, limit: int = 50) -> RunReport:
        """Run every due action (at most ``limit``), one transaction each."""
        report = RunReport()
        with self._lock:
            with session_scope(self.factory) as session:
                due = list(
                    session.scalars(
                        select(NodeAction.id)
                        .where(
                            NodeAction.status == service.PENDING,
                            NodeAction.next_attempt_at <= utcnow(),
                        )
                        .order_by(NodeAction.id)
                        .limit(limit)
                    )
                )
            for action_id in due:
                self._run_one(action_id, report)
        return report

    def _run_one(self, action_id: int, report: RunReport) -> None:
        with session_scope(self.factory) as session:
            action = session.scalars(
                select(NodeAction)
                .where(NodeAction.id == action_id, NodeAction.status == service.PENDING)
                .with_for_update(skip_locked=True)
            ).one_or_none()
            if action is None:
                return  # run by another process meanwhile
            earlier = session.scalar(
                select(NodeAction.id)
                .where(
                    NodeAction.node_id == action.node_id,
                    NodeAction.status == service.PENDING,
                    NodeAction.id < action.id,
                )
                .limit(1)
            )
            if earlier is not None:
                return  # the node's earlier action first (it may be waiting for its retry)
            outcome = self._carry_out(action)
            action.attempts += 1
            action.returncode = outcome.returncode
            stamp = utcnow()
            action.output = outcome.output
            if outcome.ok:
                action.status = service.SUCCEEDED
                action.finished_at = stamp
                action.next_attempt_at = None
                report.succeeded += 1
                log.info(
                    "action %d (%s %s %s) succeeded",
                    action.id,
                    action.system,
                    action.verb,
                    action.target,
                )
            elif action.attempts >= MAX_ATTEMPTS:
                action.status = service.FAILED
                action.finished_at = stamp
                action.next_attempt_at = None
                report.failed += 1
                log.error(
                    "action %d (%s %s %s) failed after %d attempts: %s",
                    action.id,
                    action.system,
                    action.verb,
                    action.target,
                    action.attempts,
                    outcome.output,
                )
            else:
                wait = BACKOFF_S[min(action.attempts, len(BACKOFF_S)) - 1]
                action.next_attempt_at = stamp + timedelta(seconds=wait)
                report.retried += 1
                log.warning(
                    "action %d (%s %s %s) attempt %d failed, retry in %g s: %s",
                    action.id,
                    action.system,
                    action.verb,
                    action.target,
                    action.attempts,
                    wait,
                    outcome.output,
                )

    def _carry_out(self, action: NodeAction) -> commands.Outcome:
        if action.system == "kubernetes":
            if self.kubeconfig is None:
                return commands.Outcome(
                    None, "Kubernetes is not configured (FLEETWATCH_KUBECONFIG)"
                )
            target = kubernetes.KubeTarget(self.kubeconfig)
            return kubernetes.run(target, list(action.command), timeout_s=self.timeout_s)
        return commands.run(list(action.command), timeout_s=self.timeout_s)

    def job(self) -> None:
        """Scheduler wrapper: errors are logged, never raised."""
        try:
            self.run_once()
        except Exception:
            log.exception("action worker run failed")

    def wake(self) -> None:
        """Actions were committed: run them now (never blocks)."""
        self._woken.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._woken.wait()
            self._woken.clear()
            if self._stop.is_set():
                return
            self.job()

    def start(self) -> None:
        """Start the thread that serves :meth:`wake` (a daemon)."""
        self._thread = threading.Thread(target=self._loop, name="action-wake", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the wake-up thread."""
        self._stop.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
