"""Maintenance windows: created, ended and listed, and which nodes they cover.

A window selects nodes by Alertmanager matchers (:mod:`app.alerts.silences`) over a node's
labels and ``hostname`` — the labels every alert of that node carries — so ``hostname =
gpu-07`` is one node and ``rack = r12`` a group. Which nodes a window covers is decided with
their labels at the time of asking. While a window is in force its nodes' alerts are muted
(the evaluator marks them silenced), automation leaves them alone
(:mod:`app.remediation.automation`), and the time is left out of their availability
(:mod:`app.reliability.service`). Retired nodes are covered by nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.silences import matches
from app.audit import service as audit
from app.db import utcnow
from app.errors import BadRequest, Conflict, NotFound
from app.fleet.models import Node
from app.ingest.fields import plain_text
from app.maintenance.models import MaintenanceWindow

#: The longest window: a node "in maintenance" for months is out of the fleet (retire it).
MAX_LENGTH = timedelta(days=90)
#: How far back a window may start (a form filled in a few minutes ago); earlier would rewrite
#: the availability of time already past.
BACKDATE_GRACE = timedelta(minutes=5)
MAX_REASON = 1024
MAX_ACTOR = 128
HOSTNAME = "hostname"

Interval = tuple[datetime, datetime]


def node_labels(hostname: str, labels: Mapping[str, Any] | None) -> dict[str, str]:
    """What a window's matchers see of a node: its labels as text, and ``hostname``."""
    return {**{k: str(v) for k, v in (labels or {}).items()}, HOSTNAME: hostname}


def host_matchers(hostname: str) -> list[dict[str, str]]:
    """The matchers of a window for one node."""
    return [{"name": HOSTNAME, "op": "=", "value": hostname}]


def _fleet(session: Session) -> list[tuple[int, str, dict[str, str]]]:
    rows = session.execute(
        select(Node.id, Node.hostname, Node.labels).where(Node.retired_at.is_(None))
    )
    return [(node_id, host, node_labels(host, labels)) for node_id, host, labels in rows]


def selected(session: Session, matchers: list[dict[str, str]]) -> list[str]:
    """Hostnames of the nodes (not retired) ``matchers`` select now, sorted."""
    return sorted(host for _, host, labels in _fleet(session) if matches(matchers, labels))


def audit_state(window: MaintenanceWindow) -> dict[str, object]:
    """What the audit trail keeps of a maintenance window."""
    return {
        "matchers": window.matchers,
        "reason": window.reason,
        "starts_at": window.starts_at,
        "ends_at": window.ends_at,
        "created_by": window.created_by,
        "ended_by": window.ended_by,
    }


def create(
    session: Session,
    *,
    matchers: list[dict[str, str]],
    reason: str,
    starts_at: datetime | None,
    ends_at: datetime,
    created_by: str,
    now: datetime | None = None,
) -> MaintenanceWindow:
    """A window (flushed); ``starts_at`` defaults to now.

    Raises:
        BadRequest: naming the field: no reason (or over 1,024 characters), no author, a
            control character, ``starts_at`` more than :data:`BACKDATE_GRACE` ago, ``ends_at``
            not after ``starts_at`` or not in the future, longer than :data:`MAX_LENGTH`,
            matchers that select no node.
    """
    now = now or utcnow()
    starts_at = starts_at or now
    reason = reason.strip()
    if not reason:
        raise BadRequest("reason: say why the nodes are in maintenance")
    if len(reason) > MAX_REASON:
        raise BadRequest(f"reason: at most {MAX_REASON} characters")
    created_by = created_by.strip()
    if not created_by or len(created_by) > MAX_ACTOR:
        raise BadRequest(f"created_by: who plans it, 1 to {MAX_ACTOR} characters")
    for field, text in (("reason", reason), ("created_by", created_by)):
        try:
            plain_text(text)
        except ValueError as exc:
            raise BadRequest(f"{field}: {exc}") from None
    if starts_at < now - BACKDATE_GRACE:
        # A window opened in the past would erase interruptions already counted.
        raise BadRequest(
            "starts_at: a window starts now or later (at most "
            f"{int(BACKDATE_GRACE.total_seconds() // 60)} min ago)"
        )
    if ends_at <= starts_at:
        raise BadRequest("ends_at: must be after starts_at")
    if ends_at <= now:
        raise BadRequest("ends_at: must be in the future")
    if ends_at - starts_at > MAX_LENGTH:
        raise BadRequest(f"ends_at: a window lasts at most {MAX_LENGTH.days} days")
    if not matchers:
        raise BadRequest("matchers: at least one")
    if not selected(session, matchers):
        raise BadRequest("matchers: they select no node of the fleet (labels and hostname)")
    window = MaintenanceWindow(
        matchers=matchers,
        reason=reason,
        starts_at=starts_at,
        ends_at=ends_at,
        created_by=created_by,
        created_at=now,
    )
    session.add(window)
    session.flush()
    audit.note_change("maintenance_window", window.id, before=None, after=audit_state(window))
    return window


def get(session: Session, window_id: int) -> MaintenanceWindow:
    """Window ``window_id``.

    Raises:
        NotFound: no such window.
    """
    window = session.get(MaintenanceWindow, window_id)
    if window is None:
        raise NotFound(f"no maintenance window with id {window_id}")
    return window


def end(
    session: Session, *, window_id: int, actor: str, now: datetime | None = None
) -> MaintenanceWindow:
    """End a window now (one not started yet is cancelled: it never covers anything).

    Raises:
        NotFound: no such window.
        Conflict: it has ended already.
    """
    now = now or utcnow()
    window = get(session, window_id)
    if window.ends_at <= now or window.ends_at <= window.starts_at:
        raise Conflict(f"maintenance window {window_id} has ended (or was cancelled) already")
    actor = actor.strip()[:MAX_ACTOR] or "unknown"
    before = audit.snapshot(audit_state(window))
    window.ends_at = max(now, window.starts_at)
    window.ended_by = actor
    session.flush()
    audit.note_change("maintenance_window", window.id, before=before, after=audit_state(window))
    return window


def listing(
    session: Session, *, include_ended: bool = False, now: datetime | None = None
) -> list[MaintenanceWindow]:
    """Windows in force or to come, soonest first (every window, newest first, with
    ``include_ended``)."""
    now = now or utcnow()
    stmt = select(MaintenanceWindow)
    if include_ended:
        stmt = stmt.order_by(MaintenanceWindow.starts_at.desc(), MaintenanceWindow.id.desc())
    else:
        stmt = stmt.where(
            MaintenanceWindow.ends_at > now,
            MaintenanceWindow.ends_at > MaintenanceWindow.starts_at,  # not cancelled
        ).order_by(MaintenanceWindow.starts_at, MaintenanceWindow.id)
    return list(session.scalars(stmt))


def _in_force(session: Session, now: datetime) -> list[MaintenanceWindow]:
    return list(
        session.scalars(
            select(MaintenanceWindow)
            .where(MaintenanceWindow.starts_at <= now, MaintenanceWindow.ends_at > now)
            .order_by(MaintenanceWindow.ends_at.desc(), MaintenanceWindow.id)
        )
    )


@dataclass(frozen=True)
class InMaintenance:
    """A node's window in force: the one that ends last where several cover it."""

    window_id: int
    reason: str
    ends_at: datetime


def hosts_in_maintenance(
    session: Session, *, now: datetime | None = None
) -> dict[str, InMaintenance]:
    """Hostname → its window, for every node (not retired) a window covers at ``now``. One
    query when no window is in force; else one more over the nodes' labels."""
    windows = _in_force(session, now or utcnow())
    if not windows:
        return {}
    covered: dict[str, InMaintenance] = {}
    for _, host, labels in _fleet(session):
        for w in windows:
            if matches(w.matchers, labels):
                covered[host] = InMaintenance(w.id, w.reason, w.ends_at)
                break
    return covered


def covering(session: Session, node: Node, *, now: datetime | None = None) -> InMaintenance | None:
    """The window in force at ``now`` that covers ``node`` (the one ending last), or ``None``
    (always for a retired node)."""
    if node.retired_at is not None:
        return None
    labels = node_labels(node.hostname, node.labels)
    for w in _in_force(session, now or utcnow()):
        if matches(w.matchers, labels):
            return InMaintenance(w.id, w.reason, w.ends_at)
    return None


def windows_of_node(
    session: Session, node: Node, *, now: datetime | None = None
) -> list[MaintenanceWindow]:
    """The windows in force or to come that cover ``node``, soonest first."""
    labels = node_labels(node.hostname, node.labels)
    return [w for w in listing(session, now=now) if matches(w.matchers, labels)]


def _merge(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end_ in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end_))
        else:
            merged.append((start, end_))
    return merged


def node_intervals(
    session: Session, *, start: datetime, end: datetime
) -> dict[int, list[Interval]]:
    """Node id → the stretches of ``start`` … ``end`` it spent in maintenance (windows clipped
    to the range, overlaps merged, sorted), for nodes covered by at least one window then."""
    windows = list(
        session.scalars(
            select(MaintenanceWindow).where(
                MaintenanceWindow.starts_at < end,
                MaintenanceWindow.ends_at > start,
                MaintenanceWindow.ends_at > MaintenanceWindow.starts_at,
            )
        )
    )
    if not windows:
        return {}
    found: dict[int, list[Interval]] = {}
    rows = session.execute(select(Node.id, Node.hostname, Node.labels))
    for node_id, host, raw in rows:
        labels = node_labels(host, raw)
        spans = [
            (max(w.starts_at, start), min(w.ends_at, end))
            for w in windows
            if matches(w.matchers, labels)
        ]
        if spans:
            found[node_id] = _merge(spans)
    return found


def overlap_s(a: Interval, spans: Iterable[Interval]) -> float:
    """Seconds of interval ``a`` inside the (merged, disjoint) ``spans``."""
    total = 0.0
    for start, end_ in spans:
        total += max(0.0, (min(a[1], end_) - max(a[0], start)).total_seconds())
    return total


def inside(at: datetime, spans: Iterable[Interval]) -> bool:
    """Whether ``at`` falls in one of ``spans``."""
    return any(start <= at < end_ for start, end_ in spans)
