"""Repeat offenders: the nodes and GPUs whose faults come back, from the incident history.

* a **node** with at least ``min_incidents`` (3) incidents in ``window`` (7 days);
* a **GPU** with the same Xid in at least ``min_incidents`` (2) incidents in ``window``
  (24 hours) — bursts, not log lines: a storm of 500 identical lines is one incident —, as
  NVIDIA NVSentinel escalates a repeated Xid 48 on one GPU within 24 hours.

Retired nodes are left out (their history stays on their pages). Both are one grouped query
over the incident tables, bounded by the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, distinct, func, select
from sqlalchemy.orm import Session

from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node, in_service
from app.incidents.models import Incident, IncidentEvent

NODE_WINDOW = timedelta(days=7)
NODE_MIN_INCIDENTS = 3
GPU_WINDOW = timedelta(hours=24)
GPU_MIN_INCIDENTS = 2


@dataclass(frozen=True)
class RepeatNode:
    """A node with ``incidents`` incidents in the window, ``job_fatal`` of them job-fatal."""

    hostname: str
    incidents: int
    job_fatal: int
    last_event_at: datetime


@dataclass(frozen=True)
class RepeatGpu:
    """A GPU whose Xid ``xid`` came in ``incidents`` separate incidents in the window."""

    hostname: str
    gpu_index: int
    xid: int
    incidents: int
    last_event_at: datetime


def repeat_nodes(
    session: Session,
    *,
    now: datetime,
    window: timedelta = NODE_WINDOW,
    min_incidents: int = NODE_MIN_INCIDENTS,
    limit: int = 20,
) -> list[RepeatNode]:
    """Nodes in service with at least ``min_incidents`` incidents (self-tests left out) whose
    last event is within ``window`` of ``now``, most incidents first."""
    count = func.count(Incident.id)
    fatal = func.sum(case((Incident.job_fatal, 1), else_=0))
    last = func.max(Incident.last_event_at)
    stmt = (
        select(Node.hostname, count, fatal, last)
        .join(Node, Node.id == Incident.node_id)
        .where(Incident.last_event_at >= now - window, Incident.test.is_(False), in_service())
        .group_by(Node.hostname)
        .having(count >= min_incidents)
        .order_by(count.desc(), last.desc(), Node.hostname)
        .limit(limit)
    )
    return [RepeatNode(host, int(n), int(f or 0), at) for host, n, f, at in session.execute(stmt)]


def repeat_gpus(
    session: Session,
    *,
    now: datetime,
    window: timedelta = GPU_WINDOW,
    min_incidents: int = GPU_MIN_INCIDENTS,
    limit: int = 20,
) -> list[RepeatGpu]:
    """(GPU, Xid) pairs of nodes in service seen in at least ``min_incidents`` incidents
    within ``window`` of ``now``, most incidents first."""
    count = func.count(distinct(IncidentEvent.incident_id))
    last = func.max(NodeEvent.occurred_at)
    stmt = (
        select(Node.hostname, Gpu.index, NodeEvent.xid, count, last)
        .join(IncidentEvent, IncidentEvent.event_id == NodeEvent.id)
        .join(Gpu, Gpu.id == NodeEvent.gpu_id)
        .join(Node, Node.id == NodeEvent.node_id)
        .where(
            NodeEvent.occurred_at >= now - window,
            NodeEvent.xid.is_not(None),
            IncidentEvent.incident_id.is_not(None),
            NodeEvent.test.is_(False),
            in_service(),
        )
        .group_by(Node.hostname, Gpu.index, NodeEvent.xid)
        .having(count >= min_incidents)
        .order_by(count.desc(), last.desc(), Node.hostname, Gpu.index)
        .limit(limit)
    )
    return [
        RepeatGpu(host, int(index), int(xid or 0), int(n), at)
        for host, index, xid, n, at in session.execute(stmt)
    ]
