"""Queries of the fleet overview: every node with its GPUs' latest values in a fixed number of
queries (whatever the fleet size), and the newest events fleet-wide."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session, aliased

from app.events.models import NodeEvent
from app.fleet import service as fleet_service
from app.fleet.models import Gpu, Node, in_service
from app.fleet.service import NodeView
from app.series import gpu_now
from app.topology.models import TopologyChange

#: The metrics of the newest sample the overview reads: its overlays, the table's mean
#: utilization and hottest GPU, and what the health checks read from the latest values
#: (``app.health.checks.latest_values``; a test keeps the two lists in step).
LATEST_METRICS = (
    "util_gpu_pct",
    "mem_used_bytes",
    "temp_c",
    "power_w",
    "power_limit_w",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "pcie_link_gen",
    "pcie_link_gen_max",
    "pcie_link_width",
    "pcie_link_width_max",
)


def latest_values(session: Session) -> dict[int, dict[str, Any]]:
    """Every GPU's newest sample (:data:`LATEST_METRICS` name → value), by GPU id, in one
    query (:func:`app.series.gpu_now.newest`): a primary-key lookup per GPU, with no list of
    ids sent. 38 columns × 8,000 GPUs cost
    several times more to read than these 11."""
    return gpu_now.newest_by_gpu(session, LATEST_METRICS)


def list_views(
    session: Session, *, stale_after_s: float, now: datetime, search: str | None = None
) -> list[NodeView]:
    """Every node (hostname containing ``search``, any case), sorted by hostname, with its
    freshness, GPUs and their latest :data:`LATEST_METRICS`: three statements of plain rows
    (:func:`app.fleet.service.list_node_rows`)."""
    return fleet_service.list_node_rows(
        session, stale_after_s=stale_after_s, now=now, search=search, metrics=LATEST_METRICS
    )


@dataclass(frozen=True)
class RecentEvent:
    """One line of the recent-events panel: ``kind`` as the agent sent it (``xid``,
    ``gpu_lost``, ``thermal_throttle`` …) or ``topology_change``; ``at`` the agent's time of
    the event (a topology change: when the server received the new topology)."""

    at: datetime
    hostname: str
    kind: str
    xid: int | None
    gpu_index: int | None
    message: str | None


def recent_events(session: Session, *, limit: int) -> list[RecentEvent]:
    """The newest ``limit`` node events fleet-wide merged with topology changes (a node's
    first topology report is not a change and is left out), newest first; retired nodes'
    left out."""
    rows = session.execute(
        select(NodeEvent, Node.hostname, Gpu.index)
        .join(Node, Node.id == NodeEvent.node_id)
        .outerjoin(Gpu, Gpu.id == NodeEvent.gpu_id)
        .where(in_service())
        .order_by(NodeEvent.occurred_at.desc(), NodeEvent.id.desc())
        .limit(limit)
    ).all()
    found = [
        RecentEvent(e.occurred_at, hostname, e.kind, e.xid, index, e.message)
        for e, hostname, index in rows
    ]
    earlier = aliased(TopologyChange)
    changes = session.execute(
        select(TopologyChange.received_at, Node.hostname)
        .join(Node, Node.id == TopologyChange.node_id)
        .where(
            in_service(),
            exists().where(
                earlier.node_id == TopologyChange.node_id,
                earlier.received_at < TopologyChange.received_at,
            ),
        )
        .order_by(TopologyChange.received_at.desc(), TopologyChange.id.desc())
        .limit(limit)
    ).all()
    found += [
        RecentEvent(at, hostname, "topology_change", None, None, "GPU/NIC topology changed")
        for at, hostname in changes
    ]
    found.sort(key=lambda e: e.at, reverse=True)
    return found[:limit]
