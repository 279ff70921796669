"""Reliability figures per node group over a range, from the lifecycle (time out of service)
and the incidents (interruptions).

* **availability** = node-hours in service / node-hours in the range. A node counts from when
  it was first seen (or the range's start) to when it was retired (or the range's end); it is
  out of service while quarantined, remediating, validating or at RMA (:mod:`app.lifecycle`).
  Planned maintenance (:mod:`app.maintenance`) is left out of both: its hours are neither
  node-hours nor out of service (``maintenance_hours`` says how many were left out).
* **interruptions**: job-fatal incidents (a lost GPU, a catalog Xid that ends the GPU's jobs:
  docs/incidents.md) that began outside the node's maintenance; self-tests left out. **MTBI**
  = node-hours / interruptions, as Meta reports for Llama 3's training cluster.
* **MTTR**: the mean length of the out-of-service stretches that ended (returned to service)
  within the range, each counted whole.
* **taxonomy**: incidents by failed component (:mod:`app.reliability.taxonomy`).

Nodes are grouped by the value of one label (default ``cluster``; ``(none)`` without it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.fleet.models import Node
from app.incidents import service as incidents
from app.lifecycle import service as lifecycle
from app.maintenance import service as maintenance
from app.reliability import taxonomy

NONE = "(none)"
HOUR_S = 3600.0


@dataclass
class GroupFigures:
    """One group's figures (see the module); ``None`` where undefined (no interruption, no
    repair, no node-hours)."""

    group: str
    nodes: int = 0
    node_hours: float = 0.0
    out_hours: float = 0.0
    maintenance_hours: float = 0.0
    incidents: int = 0
    interruptions: int = 0
    repairs: int = 0
    repair_hours: float = 0.0
    categories: Counter[str] = field(default_factory=Counter)

    @property
    def availability_pct(self) -> float | None:
        """Share of node-hours in service, percent."""
        if self.node_hours <= 0:
            return None
        return 100.0 * max(0.0, self.node_hours - self.out_hours) / self.node_hours

    @property
    def mtbi_h(self) -> float | None:
        """Node-hours per job-fatal interruption."""
        return self.node_hours / self.interruptions if self.interruptions else None

    @property
    def mttr_h(self) -> float | None:
        """Mean hours out of service of the stretches that ended in the range."""
        return self.repair_hours / self.repairs if self.repairs else None


@dataclass(frozen=True)
class Report:
    """The figures of every group (largest first) and of the fleet, and the taxonomy."""

    start: datetime
    end: datetime
    group_label: str
    groups: list[GroupFigures]
    fleet: GroupFigures
    taxonomy: list[tuple[str, int, float]]  # category, incidents, share in percent


def report(session: Session, *, start: datetime, end: datetime, group_label: str) -> Report:
    """The figures over ``start`` … ``end`` grouped by ``group_label``.

    Raises:
        ValueError: ``end`` is not after ``start``.
    """
    if end <= start:
        raise ValueError("end: must be after start")
    fleet = GroupFigures("fleet")
    groups: dict[str, GroupFigures] = {}
    spans: dict[int, tuple[str, datetime, datetime]] = {}
    planned = maintenance.node_intervals(session, start=start, end=end)
    for node in session.scalars(select(Node).where(Node.first_seen_at.is_not(None))):
        first = node.first_seen_at or node.created_at
        node_start = max(start, first)
        node_end = min(end, node.retired_at) if node.retired_at else end
        if node_end <= node_start:
            continue
        value = (node.labels or {}).get(group_label)
        name = str(value) if value is not None else NONE
        spans[node.id] = (name, node_start, node_end)
        planned_h = maintenance.overlap_s((node_start, node_end), planned.get(node.id, ())) / HOUR_S
        hours = (node_end - node_start).total_seconds() / HOUR_S - planned_h
        for figures in (groups.setdefault(name, GroupFigures(name)), fleet):
            figures.nodes += 1
            figures.node_hours += hours
            figures.maintenance_hours += planned_h
    for period in lifecycle.out_periods(session, until=end):
        span = spans.get(period.node_id)
        if span is None:
            continue
        name, node_start, node_end = span
        out_start, out_end = max(period.start, node_start), min(period.end or end, node_end)
        out_h = 0.0
        if out_end > out_start:
            out_s = (out_end - out_start).total_seconds()
            out_s -= maintenance.overlap_s((out_start, out_end), planned.get(period.node_id, ()))
            out_h = out_s / HOUR_S
        for figures in (groups[name], fleet):
            figures.out_hours += out_h
            if period.end is not None and start <= period.end < end:
                figures.repairs += 1
                figures.repair_hours += (period.end - period.start).total_seconds() / HOUR_S
    counted: Counter[str] = Counter()
    for incident, _hostname in incidents.incidents_between(session, start=start, end=end):
        span = spans.get(incident.node_id)
        if span is None:
            continue
        kind = taxonomy.category(incident.kinds or [], incident.xids or [])
        counted[kind] += 1
        for figures in (groups[span[0]], fleet):
            figures.incidents += 1
            figures.interruptions += int(
                incident.job_fatal
                and not maintenance.inside(incident.opened_at, planned.get(incident.node_id, ()))
            )
            figures.categories[kind] += 1
    total = sum(counted.values())
    return Report(
        start=start,
        end=end,
        group_label=group_label,
        groups=sorted(groups.values(), key=lambda g: (-g.nodes, g.group)),
        fleet=fleet,
        taxonomy=[
            (name, counted[name], 100.0 * counted[name] / total)
            for name in taxonomy.ORDER
            if counted[name]
        ],
    )
