"""Grouping fault events into incidents, and reading them.

:func:`absorb` runs in the ingest's transaction, under the node's row lock, after a batch with
events is stored: it takes the node's fault events (Xid and lost-GPU events) not examined yet
and, oldest first, adds each to the node's incident it falls within the quiet period of, or
opens one. An event that causes no health finding (an application Xid such as 13 or 31, per
the Xid lists in force) joins an incident around it but opens none. An incident spans at most
``rules.burst_max_s`` (``FLEETWATCH_INCIDENT_MAX_S``, 1 hour): an event that would stretch it
further opens the next one, so a storm that never pauses for the quiet period becomes one
incident per hour, each counted by the repeat-offender rules, instead of one incident forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.health import actions, reasons
from app.health.rules import LOST_EVENT_KINDS, SEVERITY, HealthRules, State
from app.incidents.models import Incident, IncidentEvent

#: The quiet period when a caller has no settings at hand (``FLEETWATCH_INCIDENT_QUIET_S``).
DEFAULT_QUIET_S = 180.0
#: Alerts of the node that turn pending or firing up to this long after the incident closes
#: are still its own (a rule's ``for`` and evaluation interval delay them).
ALERT_LAG = timedelta(minutes=5)
#: How far back :func:`absorb` looks for events not examined yet (a batch replayed from an
#: agent's spool after a day-long outage still groups what it brings).
LOOKBACK = timedelta(days=1)
FAULT_KINDS = ("xid", *sorted(LOST_EVENT_KINDS))


def _finding(event: Any, rules: HealthRules) -> tuple[State | None, str | None]:
    """(health state, reason code) an event causes: a lost GPU is Unhealthy (``gpu_lost``), an
    Xid as the lists in force say (None for an application Xid), anything else none."""
    if event.kind in LOST_EVENT_KINDS:
        return State.UNHEALTHY, reasons.GPU_LOST
    if event.xid is None:
        return None, None
    return rules.xid_state(event.xid), reasons.xid_code(event.xid)


def _add(incident: Incident, event: Any, gpu_index: int | None, rules: HealthRules) -> None:
    """Fold ``event`` into ``incident``'s span, lists, state, job-fatal flag and action."""
    incident.opened_at = min(incident.opened_at, event.occurred_at)
    incident.last_event_at = max(incident.last_event_at, event.occurred_at)
    incident.event_count += 1
    if gpu_index is not None and gpu_index not in incident.gpu_indexes:
        incident.gpu_indexes = sorted([*incident.gpu_indexes, gpu_index])
    if event.xid is not None and event.xid not in incident.xids:
        incident.xids = sorted([*incident.xids, event.xid])
    if event.kind not in incident.kinds:
        incident.kinds = sorted([*incident.kinds, event.kind])
    state, code = _finding(event, rules)
    if state is not None and SEVERITY[state] > SEVERITY[State(incident.state)]:
        incident.state = state.value
    fatal = event.kind in LOST_EVENT_KINDS or (
        event.xid is not None and actions.ends_jobs(event.xid)
    )
    incident.job_fatal = incident.job_fatal or fatal
    if code is not None:
        action = actions.suggest(code, message=event.message)
        if actions.RANK[action.code] > actions.RANK.get(incident.action_code, -1):
            incident.action_code, incident.action_text = action.code, action.text


def absorb(
    session: Session, *, node_id: int, rules: HealthRules, quiet_s: float, now: datetime
) -> int:
    """Group the node's fault events not examined yet into its incidents; returns how many
    events joined one. Idempotent: every examined event gets its ``incident_event`` row."""
    examined = exists().where(IncidentEvent.event_id == NodeEvent.id)
    pending = session.execute(
        select(
            NodeEvent.id,
            NodeEvent.gpu_id,
            NodeEvent.occurred_at,
            NodeEvent.kind,
            NodeEvent.xid,
            NodeEvent.message,
            NodeEvent.test,
        )
        .where(
            NodeEvent.node_id == node_id,
            NodeEvent.kind.in_(FAULT_KINDS),
            NodeEvent.received_at >= now - LOOKBACK,
            ~examined,
        )
        .order_by(NodeEvent.occurred_at, NodeEvent.id)
    ).all()
    if not pending:
        return 0
    quiet = timedelta(seconds=quiet_s)
    indexes = dict(session.execute(select(Gpu.id, Gpu.index).where(Gpu.node_id == node_id)).all())
    open_ones = list(
        session.scalars(
            select(Incident)
            .where(
                Incident.node_id == node_id,
                Incident.last_event_at >= pending[0].occurred_at - quiet,
                Incident.opened_at <= pending[-1].occurred_at + quiet,
            )
            .order_by(Incident.opened_at)
        )
    )
    longest = timedelta(seconds=rules.burst_max_s)
    joined = 0
    links = []
    for event in pending:
        at = event.occurred_at
        incident = next(
            (
                i
                for i in reversed(open_ones)
                # A self-test fault is an incident of its own, never part of a real one.
                if bool(i.test) == bool(event.test)
                and i.opened_at - quiet <= at <= i.last_event_at + quiet
                and max(i.last_event_at, at) - min(i.opened_at, at) <= longest
            ),
            None,
        )
        if incident is None and _finding(event, rules)[0] is not None:
            incident = Incident(
                node_id=node_id,
                opened_at=event.occurred_at,
                last_event_at=event.occurred_at,
                event_count=0,
                gpu_indexes=[],
                xids=[],
                kinds=[],
                state=State.DEGRADED.value,
                job_fatal=False,
                action_code="watch",
                action_text=actions.TITLES["watch"].lower(),
                updated_at=now,
                test=bool(event.test),
            )
            session.add(incident)
            open_ones.append(incident)
        if incident is not None:
            _add(incident, event, indexes.get(event.gpu_id), rules)
            incident.updated_at = now
            joined += 1
        links.append((event.id, incident))
    session.flush()
    session.add_all(
        IncidentEvent(event_id=event_id, incident_id=i.id if i is not None else None)
        for event_id, i in links
    )
    session.flush()
    return joined


@dataclass(frozen=True)
class IncidentRow:
    """An incident with its node's hostname and whether it is still open at ``now``."""

    incident: Incident
    hostname: str
    open: bool
    closes_at: datetime


def _row(incident: Incident, hostname: str, quiet_s: float, now: datetime) -> IncidentRow:
    closes_at = incident.last_event_at + timedelta(seconds=quiet_s)
    return IncidentRow(incident, hostname, closes_at > now, closes_at)


def list_incidents(
    session: Session,
    *,
    quiet_s: float,
    now: datetime,
    hostname: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 200,
) -> list[IncidentRow]:
    """Incidents newest first (by their last event): of ``hostname``, ``open`` or ``closed``
    at ``now``, with an event since ``since``, opened by ``until``; retired nodes' included
    (their history)."""
    stmt = select(Incident, Node.hostname).join(Node, Node.id == Incident.node_id)
    boundary = now - timedelta(seconds=quiet_s)
    if hostname is not None:
        stmt = stmt.where(Node.hostname == hostname)
    if status == "open":
        stmt = stmt.where(Incident.last_event_at > boundary)
    elif status == "closed":
        stmt = stmt.where(Incident.last_event_at <= boundary)
    if since is not None:
        stmt = stmt.where(Incident.last_event_at >= since)
    if until is not None:
        stmt = stmt.where(Incident.opened_at <= until)
    stmt = stmt.order_by(Incident.last_event_at.desc(), Incident.id.desc()).limit(limit)
    return [_row(i, h, quiet_s, now) for i, h in session.execute(stmt)]


def get_incident(
    session: Session, *, incident_id: int, quiet_s: float, now: datetime
) -> tuple[IncidentRow, list[Any]]:
    """One incident and its events, oldest first (id, occurred_at, kind, xid, gpu index,
    PCI bus id, message).

    Raises:
        NotFound: no such incident.
    """
    found = session.execute(
        select(Incident, Node.hostname)
        .join(Node, Node.id == Incident.node_id)
        .where(Incident.id == incident_id)
    ).first()
    if found is None:
        raise NotFound(f"no incident {incident_id}")
    events = session.execute(
        select(
            NodeEvent.id,
            NodeEvent.occurred_at,
            NodeEvent.kind,
            NodeEvent.xid,
            Gpu.index.label("gpu_index"),
            NodeEvent.pci_bus_id,
            NodeEvent.message,
        )
        .join(IncidentEvent, IncidentEvent.event_id == NodeEvent.id)
        .outerjoin(Gpu, Gpu.id == NodeEvent.gpu_id)
        .where(IncidentEvent.incident_id == incident_id)
        .order_by(NodeEvent.occurred_at, NodeEvent.id)
    ).all()
    return _row(found[0], found[1], quiet_s, now), list(events)


def incident_keys(
    session: Session, *, since: datetime, node_ids: frozenset[int] | None = None
) -> list[tuple[int, int | None, str, int | None, int]]:
    """(node id, GPU id, event kind, Xid, incident id) of every event in an incident that
    occurred since ``since``, distinct (of ``node_ids`` when given), self-test ones left out:
    what an alert rule counting incidents reads."""
    stmt = (
        select(
            NodeEvent.node_id,
            NodeEvent.gpu_id,
            NodeEvent.kind,
            NodeEvent.xid,
            IncidentEvent.incident_id,
        )
        .join(IncidentEvent, IncidentEvent.event_id == NodeEvent.id)
        .where(
            NodeEvent.occurred_at >= since,
            IncidentEvent.incident_id.is_not(None),
            NodeEvent.test.is_(False),  # a self-test is no offence
        )
        .distinct()
    )
    if node_ids is not None:
        stmt = stmt.where(NodeEvent.node_id.in_(sorted(node_ids)))
    return [tuple(row) for row in session.execute(stmt)]  # type: ignore[misc]


def prune(session: Session, *, cutoff: datetime) -> int:
    """Delete incidents whose last event is older than ``cutoff`` (the event retention: their
    events are gone too); returns how many."""
    result = session.execute(delete(Incident).where(Incident.last_event_at < cutoff))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def incidents_between(
    session: Session, *, start: datetime, end: datetime
) -> list[tuple[Incident, str]]:
    """Every incident (self-tests left out) whose first event falls in ``start`` … ``end``,
    with its node's hostname, oldest first."""
    return [
        (incident, hostname)
        for incident, hostname in session.execute(
            select(Incident, Node.hostname)
            .join(Node, Node.id == Incident.node_id)
            .where(
                Incident.opened_at >= start,
                Incident.opened_at < end,
                Incident.test.is_(False),
            )
            .order_by(Incident.opened_at, Incident.id)
        )
    ]


def incidents_of_alerts(
    session: Session,
    *,
    keys: set[tuple[str, bool]],
    at: datetime,
    quiet_s: float = DEFAULT_QUIET_S,
) -> dict[tuple[str, bool], int]:
    """For alerts of nodes that fired at ``at``, keyed ``(hostname, test)``: the id of the
    node's incident they belong to (the latest whose span, from one quiet period before its
    first event to :data:`ALERT_LAG` after it closes, holds ``at``; a self-test alert to a
    self-test incident, a real one to a real one), as the incident page lists the alerts it
    caused. Keys without such an incident are left out. One statement."""
    if not keys:
        return {}
    quiet = timedelta(seconds=quiet_s)
    rows = session.execute(
        select(Node.hostname, Incident.test, Incident.id)
        .join(Node, Node.id == Incident.node_id)
        .where(
            Node.hostname.in_(sorted({h for h, _ in keys})),
            Incident.opened_at <= at + quiet,
            Incident.last_event_at >= at - quiet - ALERT_LAG,
        )
        .order_by(Incident.opened_at, Incident.id)
    )
    found: dict[tuple[str, bool], int] = {}
    for hostname, test, incident_id in rows:
        key = (hostname, bool(test))
        if key in keys:
            found[key] = incident_id  # the latest wins
    return found


def incidents_by_id(
    session: Session, *, ids: set[int], quiet_s: float, now: datetime
) -> dict[int, IncidentRow]:
    """The incidents of ``ids`` that still exist, with their hostnames and whether each is
    open at ``now``. One statement."""
    if not ids:
        return {}
    rows = session.execute(
        select(Incident, Node.hostname)
        .join(Node, Node.id == Incident.node_id)
        .where(Incident.id.in_(sorted(ids)))
    )
    return {i.id: _row(i, h, quiet_s, now) for i, h in rows}
