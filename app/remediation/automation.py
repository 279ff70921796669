"""Rules that act: an alert of a rule with ``action: quarantine`` that turns firing gets one
decision (``automation_decision``), by the rule's ``action_mode``:

* ``recommend`` (the default): recorded; the alert page offers the quarantine in one click.
* ``automatic``: the node is quarantined (cause ``rule``), its scheduler actions logged and
  run — unless the circuit breaker is open or this quarantine would trip it.
* ``dry_run``: recorded with the commands that would have run; nothing changes.

An alert whose node is not in service, is retired or in a maintenance window
(:mod:`app.maintenance`), or whose alert is silenced or a self-test gets ``skipped``. The
**circuit breaker** (as NVIDIA NVSentinel's) trips when an automatic quarantine would make more
than ``max_nodes`` automatic quarantines within ``window_s``, or more than ``max_pct`` % of the
node's group (the nodes sharing its ``group_label`` value; one node of any group is always
allowed) within it: that quarantine and every later automatic one are ``blocked`` until a
person resets the breaker, and each blocked node gets a ``quarantine_blocked`` event, which the
default rule ``node-quarantine-blocked`` pages.

Decisions are made by a job every few seconds over the firing events of the last
``LOOK_BACK_S`` (an alert that fired while the server was down for longer is not acted on).
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app import wakeups
from app.alerts import service as alerts_service
from app.config import Settings
from app.db import session_scope, utcnow
from app.events import service as events_service
from app.fleet.models import Node
from app.ingest.fields import plain_text
from app.lifecycle import service as lifecycle
from app.lifecycle import states
from app.lifecycle.models import LifecycleTransition
from app.maintenance import service as maintenance
from app.remediation import service as remediation
from app.remediation import slurm
from app.remediation.models import AutomationDecision, CircuitBreaker

log = logging.getLogger(__name__)

LOOK_BACK_S = 900.0
BREAKER = "quarantine"
BLOCKED_EVENT = "quarantine_blocked"


@dataclass(frozen=True)
class Limits:
    """The circuit breaker's limits (``FLEETWATCH_AUTOMATION_BREAKER_*``)."""

    max_nodes: int = 5
    max_pct: float = 10.0
    window_s: float = 3600.0
    group_label: str = "cluster"

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """From the settings."""
        return cls(
            max_nodes=settings.automation_breaker_max_nodes,
            max_pct=settings.automation_breaker_max_pct,
            window_s=settings.automation_breaker_window_s,
            group_label=settings.automation_breaker_group_label,
        )


def breaker(session: Session) -> CircuitBreaker:
    """The breaker's row (created closed on first use)."""
    row = session.get(CircuitBreaker, BREAKER)
    if row is None:
        row = CircuitBreaker(name=BREAKER, open=False, reason="")
        session.add(row)
        session.flush()
    return row


def breaker_state(session: Session) -> CircuitBreaker:
    """The breaker as stored, or a closed one where none is (reads only)."""
    return session.get(CircuitBreaker, BREAKER) or CircuitBreaker(
        name=BREAKER, open=False, reason="", opened_at=None, reset_at=None, reset_by=None
    )


def reset_breaker(session: Session, *, actor: str) -> CircuitBreaker:
    """Close the breaker (a person decided automation may go on); flushes. The automatic
    quarantines made before it no longer count towards the limits.

    Raises:
        ValueError: ``actor`` is empty, longer than 128 characters or holds a control
            character (the message starts ``actor:``).
    """
    try:
        actor = plain_text(actor.strip())
    except ValueError as exc:
        raise ValueError(f"actor: {exc}") from None
    if not actor or len(actor) > 128:
        raise ValueError("actor: say who, in 1 to 128 characters")
    row = breaker(session)
    row.open = False
    row.reset_at = utcnow()
    row.reset_by = actor[:128]
    session.flush()
    log.warning("automatic quarantine circuit breaker reset by %s", actor)
    return row


def _recent_automatic(session: Session, since: datetime, node_ids: list[int] | None) -> int:
    query = (
        select(func.count())
        .select_from(LifecycleTransition)
        .where(
            LifecycleTransition.cause == "rule",
            LifecycleTransition.to_state == states.QUARANTINED,
            LifecycleTransition.at >= since,
        )
    )
    if node_ids is not None:
        query = query.where(LifecycleTransition.node_id.in_(node_ids))
    return int(session.scalar(query) or 0)


def _trips(
    session: Session, node: Node, limits: Limits, now: datetime, reset_at: datetime | None
) -> str | None:
    """Why quarantining ``node`` automatically now would trip the breaker, or ``None``. The
    quarantines before the last reset do not count: a person decided they had a cause."""
    since = now - timedelta(seconds=limits.window_s)
    if reset_at is not None and reset_at > since:
        since = reset_at
    total = _recent_automatic(session, since, None) + 1
    if total > limits.max_nodes:
        return (
            f"{total} automatic quarantines within {limits.window_s:g} s would exceed "
            f"the limit of {limits.max_nodes}"
        )
    value = (node.labels or {}).get(limits.group_label)
    if value is None:
        return None
    group = [
        n.id
        for n in session.scalars(select(Node).where(Node.retired_at.is_(None)))
        if (n.labels or {}).get(limits.group_label) == value
    ]
    in_group = _recent_automatic(session, since, group) + 1
    # At least one node of any group may go: a group of 3 at 10 % would otherwise allow none.
    allowed = max(1, int(limits.max_pct * len(group) / 100.0))
    if in_group > allowed:
        return (
            f"{in_group} of the {len(group)} nodes of {limits.group_label}={value} within "
            f"{limits.window_s:g} s would exceed {limits.max_pct:g} % ({allowed} node"
            f"{'s' if allowed != 1 else ''})"
        )
    return None


def decide(
    session: Session,
    firing: alerts_service.ActionFiring,
    *,
    backends: remediation.Backends,
    limits: Limits,
    now: datetime,
) -> AutomationDecision:
    """Decide for one firing alert (flushes); see the module."""
    hostname = firing.labels.get("hostname")
    node = (
        session.scalars(select(Node).where(Node.hostname == hostname)).one_or_none()
        if isinstance(hostname, str)
        else None
    )
    decision = AutomationDecision(
        alert_event_id=firing.event_id,
        at=now,
        rule=firing.rule,
        mode=firing.mode,
        node_id=node.id if node else None,
        hostname=hostname if isinstance(hostname, str) else None,
        outcome="skipped",
        detail="",
    )
    session.add(decision)
    reason = f"alert {firing.instance_id} ({firing.rule}) firing"
    if node is None:
        decision.detail = "the alert names no known node (label hostname)"
    elif firing.labels.get("test") == "true":
        decision.detail = "a self-test alert"
    elif node.retired_at is not None:
        decision.detail = "the node is retired"
    elif (window := maintenance.covering(session, node, now=now)) is not None:
        decision.detail = (
            f"the node is in maintenance window {window.window_id} until "
            f"{window.ends_at.isoformat(timespec='seconds')}: {window.reason}"
        )
    elif firing.silenced:
        decision.detail = "the alert is silenced"
    elif (state := lifecycle.current(session, node.id).state) != states.IN_SERVICE:
        decision.detail = f"the node is {state} already"
    elif firing.mode == "recommend":
        decision.outcome = "recommended"
        decision.detail = "quarantine recommended: accept it on the alert page"
    elif firing.mode == "dry_run":
        decision.outcome = "dry_run"
        commands = _would_run(node, reason, backends)
        decision.detail = "would quarantine" + (f" and run: {commands}" if commands else "")
    else:
        gate = breaker(session)
        why = "the circuit breaker is open: " + gate.reason if gate.open else None
        tripped = None if why else _trips(session, node, limits, now, gate.reset_at)
        if tripped is not None:
            gate.open, gate.opened_at, gate.reason = True, now, tripped
            why = "the circuit breaker tripped: " + tripped
            log.error("automatic quarantine circuit breaker tripped: %s", tripped)
        if why is not None:
            decision.outcome = "blocked"
            decision.detail = why
            events_service.record_server_event(
                session,
                node_id=node.id,
                kind=BLOCKED_EVENT,
                message=f"automatic quarantine by rule {firing.rule} blocked: {why}",
                at=now,
            )
        else:
            changed = lifecycle.transition(
                session,
                node=node,
                to_state=states.QUARANTINED,
                reason=reason,
                cause="rule",
                cause_ref=firing.rule,
                actor=f"fleetwatch rule {firing.rule}",
                backends=backends,
            )
            decision.outcome = "quarantined"
            decision.transition_id = changed.transition.id
            decision.detail = f"{len(changed.actions)} scheduler action(s) logged"
            if changed.actions:
                wakeups.signal_on_commit(session, wakeups.ACTIONS_CHANNEL)
    session.flush()
    return decision


def _would_run(node: Node, reason: str, backends: remediation.Backends) -> str:
    if backends.scontrol is None:
        return ""
    name = remediation.slurm_name(node)
    return shlex.join(slurm.drain_command(backends.scontrol, name, reason))


def run_due(
    factory: sessionmaker[Session],
    *,
    backends: remediation.Backends,
    limits: Limits,
    now: datetime | None = None,
) -> list[AutomationDecision]:
    """Decide every firing alert due (one transaction each, so one failing decision never
    stops the others); returns the decisions made."""
    now = now or utcnow()
    with session_scope(factory) as session:
        due = alerts_service.action_firings(
            session,
            since=now - timedelta(seconds=LOOK_BACK_S),
            handled=AutomationDecision.alert_event_id,
        )
    made = []
    for firing in due:
        try:
            with session_scope(factory) as session:
                if session.scalar(
                    select(AutomationDecision.id).where(
                        AutomationDecision.alert_event_id == firing.event_id
                    )
                ):
                    continue  # decided by another process meanwhile
                decision = decide(session, firing, backends=backends, limits=limits, now=now)
                session.expunge(decision)
                made.append(decision)
        except Exception:
            log.exception("automation: deciding for alert event %d failed", firing.event_id)
    return made


def recent(session: Session, *, limit: int = 50, node_id: int | None = None) -> list[Any]:
    """The newest decisions (of one node where given)."""
    query = select(AutomationDecision).order_by(AutomationDecision.id.desc()).limit(limit)
    if node_id is not None:
        query = query.where(AutomationDecision.node_id == node_id)
    return list(session.scalars(query))


class AutomationJob:
    """The scheduler's job: :func:`run_due` with the server's settings."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self.factory = factory
        self.backends = remediation.Backends.of(settings)
        self.limits = Limits.of(settings)

    def job(self) -> None:
        """Errors are logged, never raised."""
        try:
            for d in run_due(self.factory, backends=self.backends, limits=self.limits):
                log.info("automation: %s %s for %s (%s)", d.rule, d.outcome, d.hostname, d.detail)
        except Exception:
            log.exception("automation run failed")
