"""Runs the pending actions of the log (:mod:`app.remediation.service`), oldest first.

Each due action is claimed under a row lock (``FOR UPDATE SKIP LOCKED`` on Postgres, so two
processes never run one action twice) by marking it ``running`` with a lease, committed; it is
run without a shell and outside any transaction (a slow ``scontrol`` never holds the database),
and its exit status and output are written back in a second transaction. A lease that runs out
(the process died) makes the action due again. A Slurm drain of a node someone else drained,
and a resume of a node that is not drained or was drained by someone else, are ``skipped``
with the reason (:func:`app.remediation.slurm.already_done`). A failed run (non-zero exit, no
answer within the timeout, command not found) is retried after ``BACKOFF_S[attempt]`` until
``MAX_ATTEMPTS``, then marked ``failed``: never dropped, shown on the node page and in the API.
Actions of one node run in the order they were asked for: one waits while an earlier one of its
node is pending; nodes run side by side (up to ``PARALLEL_NODES``); a later transition of the
node supersedes its pending ones
(:func:`app.remediation.service.enqueue`).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.events import service as events_service
from app.remediation import commands, kubernetes, service, slurm
from app.remediation.models import NodeAction
from app.wake_thread import WakeThread

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
#: The node event of an action that failed for good.
FAILED_EVENT = "remediation_failed"
#: Nodes whose actions run at once (each node's in order).
PARALLEL_NODES = 8
#: Wait before the retry after attempt n (1-based): 10 s, 30 s, 1 min, 5 min.
BACKOFF_S = (10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class Claimed:
    """What a claimed action runs (read in the claim's transaction)."""

    system: str
    verb: str
    target: str
    command: list[str]


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
        self._wakes = WakeThread(self.job, name="action-wake")

    def run_once(self, *, limit: int = 50, node_id: int | None = None) -> RunReport:
        """Run every due action (at most ``limit``; of one node where given): each node's in
        order, up to :data:`PARALLEL_NODES` nodes at once, so a command that hangs until its
        timeout (a Slurm controller down, one unreachable BMC) holds its own node's actions,
        not the whole fleet's."""
        with self._lock:
            now = utcnow()
            with session_scope(self.factory) as session:
                query = (
                    select(NodeAction.id, NodeAction.node_id)
                    .where(
                        NodeAction.status.in_((service.PENDING, service.RUNNING)),
                        NodeAction.next_attempt_at <= now,
                    )
                    .order_by(NodeAction.id)
                    .limit(limit)
                )
                if node_id is not None:
                    query = query.where(NodeAction.node_id == node_id)
                due: dict[int, list[int]] = {}
                for action_id, node in session.execute(query):
                    due.setdefault(node, []).append(action_id)
            queues = list(due.values())
            if len(queues) <= 1:
                return self._run_queue(queues[0] if queues else [])
            with ThreadPoolExecutor(
                max_workers=min(PARALLEL_NODES, len(queues)), thread_name_prefix="action"
            ) as pool:
                reports = list(pool.map(self._run_queue, queues))
        return RunReport(
            succeeded=sum(r.succeeded for r in reports),
            retried=sum(r.retried for r in reports),
            failed=sum(r.failed for r in reports),
        )

    def _run_queue(self, action_ids: list[int]) -> RunReport:
        """Run one node's due actions in order."""
        report = RunReport()
        for action_id in action_ids:
            self._run_one(action_id, report)
        return report

    def _claim(self, action_id: int) -> Claimed | None:
        """Mark the action ``running`` (a lease of twice the timeout, so a process that dies
        while running it leaves it to another) and commit, so no transaction stays open while
        the command runs (on SQLite it would hold every writer)."""
        with session_scope(self.factory) as session:
            now = utcnow()
            action = session.scalars(
                select(NodeAction)
                .where(
                    NodeAction.id == action_id,
                    NodeAction.status.in_((service.PENDING, service.RUNNING)),
                    NodeAction.next_attempt_at <= now,
                )
                .with_for_update(skip_locked=True)
            ).one_or_none()
            if action is None:
                return None  # claimed by another process meanwhile
            earlier = session.scalar(
                select(NodeAction.id)
                .where(
                    NodeAction.node_id == action.node_id,
                    NodeAction.status.in_((service.PENDING, service.RUNNING)),
                    NodeAction.id < action.id,
                )
                .limit(1)
            )
            if earlier is not None:
                return None  # the node's earlier action first (it may be waiting for its retry)
            action.status = service.RUNNING
            action.next_attempt_at = now + timedelta(seconds=2 * self.timeout_s + 30)
            return Claimed(action.system, action.verb, action.target, list(action.command))

    def _run_one(self, action_id: int, report: RunReport) -> None:
        claimed = self._claim(action_id)
        if claimed is None:
            return
        try:
            outcome = self._carry_out(claimed)
        except Exception as exc:  # never leave the action running: it would hold its node's
            log.exception("action %d could not be carried out", action_id)
            outcome = commands.Outcome(None, f"{type(exc).__name__}: {exc}"[: commands.MAX_OUTPUT])
        with session_scope(self.factory) as session:
            action = session.get(NodeAction, action_id, with_for_update=True)
            if action is None:
                return  # its node was deleted meanwhile
            action.attempts += 1
            action.returncode = outcome.returncode
            action.output = outcome.output
            stamp = utcnow()
            if action.status != service.RUNNING:
                return  # superseded while it ran: its outcome kept, its status too
            what = (action.id, action.system, action.verb, action.target)
            if outcome.ok:
                action.status = service.SKIPPED if outcome.skipped else service.SUCCEEDED
                action.finished_at = stamp
                action.next_attempt_at = None
                report.succeeded += 1
                log.info("action %d (%s %s %s) %s", *what, action.status)
            elif action.attempts >= MAX_ATTEMPTS:
                action.status = service.FAILED
                action.finished_at = stamp
                action.next_attempt_at = None
                report.failed += 1
                # Paged by the default rule node-remediation-failed: the scheduler and the
                # lifecycle now disagree.
                events_service.record_server_event(
                    session,
                    node_id=action.node_id,
                    kind=FAILED_EVENT,
                    message=(
                        f"action {action.id} ({action.system} {action.verb} {action.target}) "
                        f"failed {action.attempts} times: {outcome.output}"
                    )[:2000],
                    at=stamp,
                )
                log.error(
                    "action %d (%s %s %s) failed after %d attempts: %s",
                    *what,
                    action.attempts,
                    outcome.output,
                )
            else:
                action.status = service.PENDING
                wait = BACKOFF_S[min(action.attempts, len(BACKOFF_S)) - 1]
                action.next_attempt_at = stamp + timedelta(seconds=wait)
                report.retried += 1
                log.warning(
                    "action %d (%s %s %s) attempt %d failed, retry in %g s: %s",
                    *what,
                    action.attempts,
                    wait,
                    outcome.output,
                )

    def _carry_out(self, claimed: Claimed) -> commands.Outcome:
        if claimed.system == "kubernetes":
            if self.kubeconfig is None:
                return commands.Outcome(
                    None, "Kubernetes is not configured (FLEETWATCH_KUBECONFIG)"
                )
            target = kubernetes.KubeTarget(self.kubeconfig)
            return kubernetes.run(target, claimed.command, timeout_s=self.timeout_s)
        if claimed.system == "slurm":
            already = slurm.already_done(
                claimed.verb, claimed.command[0], claimed.target, timeout_s=self.timeout_s
            )
            if already is not None:
                return commands.Outcome(0, already, skipped=True)
        return commands.run(claimed.command, timeout_s=self.timeout_s)

    def job(self) -> None:
        """Scheduler wrapper: errors are logged, never raised."""
        try:
            self.run_once()
        except Exception:
            log.exception("action worker run failed")

    def wake(self) -> None:
        """Actions were committed: run them now (never blocks)."""
        self._wakes.wake()

    def start(self) -> None:
        """Start the thread that serves :meth:`wake` (a daemon)."""
        self._wakes.start()

    def close(self) -> None:
        """Stop the wake-up thread."""
        self._wakes.close(timeout_s=5)
