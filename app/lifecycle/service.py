"""A node's lifecycle state: read it, change it (recording the transition and asking
:mod:`app.remediation` for the scheduler actions it implies), list its history.

A node without a ``node_lifecycle`` row is ``in_service``. A transition must follow
:data:`app.lifecycle.states.NEXT`; leaving ``in_service`` drains the node in the schedulers
Fleetwatch manages, entering it resumes the node there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit import service as audit
from app.db import utcnow
from app.errors import Conflict
from app.fleet import retire
from app.fleet.models import Node
from app.ingest.fields import plain_text
from app.lifecycle import states
from app.lifecycle.models import LifecycleTransition, NodeLifecycle
from app.remediation import service as remediation
from app.remediation.models import NodeAction

#: Longest actor name kept.
MAX_ACTOR = 128
#: Longest cause reference kept (an incident or alert id, a rule name).
MAX_CAUSE_REF = 64


@dataclass(frozen=True)
class Current:
    """A node's lifecycle state now; ``since`` … ``actor`` are ``None`` for a node that never
    left service."""

    state: states.State
    since: datetime | None = None
    reason: str | None = None
    cause: str | None = None
    cause_ref: str | None = None
    actor: str | None = None


def current(session: Session, node_id: int) -> Current:
    """The lifecycle state of node ``node_id``."""
    row = session.get(NodeLifecycle, node_id, populate_existing=True)
    if row is None:
        return Current(states.IN_SERVICE)
    return Current(
        states.parse_state(row.state),
        since=row.since,
        reason=row.reason,
        cause=row.cause,
        cause_ref=row.cause_ref,
        actor=row.actor,
    )


def out_of_service(session: Session) -> dict[int, NodeLifecycle]:
    """Node id → lifecycle row of every node not in service (for lists and overlays)."""
    rows = session.scalars(select(NodeLifecycle).where(NodeLifecycle.state != states.IN_SERVICE))
    return {row.node_id: row for row in rows}


@dataclass(frozen=True)
class Changed:
    """A transition made: its row and the actions it asked for (in the log, pending or
    ``dry_run``)."""

    transition: LifecycleTransition
    actions: list[NodeAction]


def transition(
    session: Session,
    *,
    node: Node,
    to_state: str,
    reason: str,
    cause: str,
    actor: str,
    backends: remediation.Backends,
    cause_ref: str | None = None,
    dry_run: bool = False,
) -> Changed:
    """Move ``node`` to ``to_state`` (flushes) and log the scheduler actions it implies.

    ``dry_run``: the actions are recorded as ``dry_run`` and never run; the state changes all
    the same (a dry run of the lifecycle itself is what :func:`check` answers).

    Raises:
        ValueError: ``to_state``, ``cause``, ``reason``, ``actor`` or ``cause_ref`` is not
            acceptable (the message starts with the field's name).
        Conflict: the node is retired, already in ``to_state``, or cannot go there from its
            state (the message lists where it can go).
    """
    # One transition of a node at a time: the node row's lock (the one the ingest takes, so a
    # batch of the node waits too) serialises two clicks, or a person and automation, so the
    # second sees the first's state and is refused, never both applied.
    session.execute(select(Node.id).where(Node.id == node.id).with_for_update(key_share=True)).all()
    session.refresh(node)
    target, reason, actor = check(
        session, node=node, to_state=to_state, reason=reason, actor=actor, cause=cause
    )
    if cause_ref is not None:
        try:
            cause_ref = plain_text(cause_ref.strip())[:MAX_CAUSE_REF] or None
        except ValueError as exc:
            raise ValueError(f"cause_ref: {exc}") from None
    now = utcnow()
    was = current(session, node.id)
    before = was.state
    row = LifecycleTransition(
        node_id=node.id,
        at=now,
        from_state=before,
        to_state=target,
        reason=reason,
        cause=cause,
        cause_ref=cause_ref,
        actor=actor,
    )
    session.add(row)
    session.flush()
    state = session.get(NodeLifecycle, node.id)
    if state is None:
        state = NodeLifecycle(node_id=node.id)
        session.add(state)
    state.state = target
    state.since = now
    state.reason = reason
    state.cause = cause
    state.cause_ref = cause_ref
    state.actor = actor
    state.transition_id = row.id
    actions = remediation.enqueue(
        session,
        node=node,
        transition_id=row.id,
        leaving_service=states.schedulable(before) and not states.schedulable(target),
        entering_service=states.schedulable(target) and not states.schedulable(before),
        reason=reason,
        actor=actor,
        backends=backends,
        dry_run=dry_run,
        entering_remediation=target == states.REMEDIATING and before != states.REMEDIATING,
    )
    session.flush()
    audit.note_change(
        "node_lifecycle",
        node.hostname,
        before=_audit_state(was),
        after={**_audit_state(current(session, node.id)), "transition_id": row.id},
    )
    return Changed(row, actions)


def _audit_state(state: Current) -> dict[str, object]:
    """What the audit trail keeps of a node's lifecycle state."""
    return {
        "state": state.state,
        "since": state.since,
        "reason": state.reason,
        "cause": state.cause,
        "cause_ref": state.cause_ref,
        "actor": state.actor,
    }


def check(
    session: Session, *, node: Node, to_state: str, reason: str, actor: str, cause: str
) -> tuple[states.State, str, str]:
    """The checked target state, reason and actor of a transition of ``node``; raises as
    :func:`transition` does, changing nothing."""
    try:
        target = states.parse_state(to_state)
    except ValueError as exc:
        raise ValueError(f"to_state: {exc}") from None
    if cause not in states.CAUSES:
        raise ValueError(f"cause: expected one of {', '.join(states.CAUSES)}, got {cause!r}")
    try:
        reason = retire.checked_reason(reason)
    except ValueError as exc:
        raise ValueError(f"reason: {exc}") from None
    try:
        actor = plain_text(actor.strip())
    except ValueError as exc:
        raise ValueError(f"actor: {exc}") from None
    if not actor or len(actor) > MAX_ACTOR:
        raise ValueError(f"actor: say who, in 1 to {MAX_ACTOR} characters")
    if node.retired_at is not None:
        raise Conflict(f"{node.hostname} is retired: return it to the fleet first")
    before = current(session, node.id).state
    if target == before:
        raise Conflict(f"{node.hostname} is {states.LABELS[before].lower()} already")
    allowed = states.NEXT[before]
    if target not in allowed:
        where = ", ".join(s for s in states.STATES if s in allowed)
        raise Conflict(f"{node.hostname} is {before}: it can go to {where}, not {target}")
    return target, reason, actor


def history(session: Session, node_id: int, *, limit: int = 50) -> list[LifecycleTransition]:
    """The node's transitions, newest first."""
    return list(
        session.scalars(
            select(LifecycleTransition)
            .where(LifecycleTransition.node_id == node_id)
            .order_by(LifecycleTransition.at.desc(), LifecycleTransition.id.desc())
            .limit(limit)
        )
    )


@dataclass(frozen=True)
class OutOfService:
    """A node not in service, for the overview's panel."""

    hostname: str
    state: str
    since: datetime
    reason: str
    cause: str
    cause_ref: str | None


def out_of_service_nodes(session: Session) -> list[OutOfService]:
    """Every node (not retired) out of service, longest out first (one statement: the
    overview's statements stay a constant few at any fleet size)."""
    rows = session.execute(
        select(Node.hostname, NodeLifecycle)
        .join(Node, Node.id == NodeLifecycle.node_id)
        .where(NodeLifecycle.state != states.IN_SERVICE, Node.retired_at.is_(None))
        .order_by(NodeLifecycle.since, Node.hostname)
    ).all()
    return [
        OutOfService(host, row.state, row.since, row.reason, row.cause, row.cause_ref)
        for host, row in rows
    ]


def out_of_service_list(session: Session, *, limit: int) -> tuple[int, list[OutOfService]]:
    """How many nodes (not retired) are out of service, and the ``limit`` longest out first."""
    rows = out_of_service_nodes(session)
    return len(rows), rows[:limit]


@dataclass(frozen=True)
class OutPeriod:
    """A stretch a node spent out of service: ``start`` … ``end`` (``None``: still out),
    and whether it ended by a return to service."""

    node_id: int
    start: datetime
    end: datetime | None


def out_periods(session: Session, *, until: datetime) -> list[OutPeriod]:
    """Every out-of-service stretch of every node that began before ``until``, from the
    transitions (oldest first per node). A node's first transition leaves ``in_service``."""
    rows = session.execute(
        select(LifecycleTransition.node_id, LifecycleTransition.at, LifecycleTransition.to_state)
        .where(LifecycleTransition.at < until)
        .order_by(LifecycleTransition.node_id, LifecycleTransition.at, LifecycleTransition.id)
    )
    periods: list[OutPeriod] = []
    open_since: dict[int, datetime] = {}
    for node_id, at, to_state in rows:
        if to_state == states.IN_SERVICE:
            began = open_since.pop(node_id, None)
            if began is not None:
                periods.append(OutPeriod(node_id, began, at))
        else:
            open_since.setdefault(node_id, at)
    periods.extend(OutPeriod(node_id, began, None) for node_id, began in open_since.items())
    return periods
