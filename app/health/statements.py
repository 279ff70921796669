"""The statements of :func:`app.health.evidence.load_evidence`, built once per pair of
windows and reused (building and cache-keying them costs more than running them on a small
fleet). Parameters: ``ids`` (node ids: an array on Postgres, expanding elsewhere), ``since``
(events and their history), ``disk_wait_s`` and ``nfs_rtt_s`` (thresholds)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    Executable,
    Integer,
    any_,
    bindparam,
    or_,
    select,
)

from app.db import UTCDateTime
from app.events import models as event_models
from app.fleet import models as fleet_models
from app.health.rules import HEALTH_POWER_BITS, LOST_EVENT_KINDS, THERMAL_BITS
from app.health.sql import before
from app.series import gpu_history, latest, port_history
from app.series.writes import LATEST_WINDOW_S

# Core tables, not ORM entities: the statements compile in about half the time (the first
# request of a process compiles them).
NodeEvent = event_models.NodeEvent.__table__.c
Node = fleet_models.Node.__table__.c
Gpu = fleet_models.Gpu.__table__.c


def _window(newest: Any) -> Any:
    """The start of a node's current window: its newest reading minus
    :data:`~app.series.writes.LATEST_WINDOW_S` (an entity quiet for longer is gone)."""
    return before(newest, LATEST_WINDOW_S)


@dataclass(frozen=True)
class Statements:
    """One statement per kind of evidence (columns as :class:`~app.health.evidence.Evidence`
    documents them)."""

    events: Executable
    history: Executable
    throttle: Executable
    links: Executable
    ports: Executable
    flapping: Executable
    ports_gone: Executable
    links_gone: Executable
    disks: Executable
    nfs: Executable


def _of_ids(column: Any, dialect: str) -> Any:
    """``column`` is one of the ``ids`` parameter: one array parameter on Postgres (an
    expanded ``IN`` of 1,000 ids costs more to render and parse than to run), else ``IN``."""
    if dialect == "postgresql":
        return column == any_(bindparam("ids", type_=ARRAY(Integer)))
    return column.in_(bindparam("ids", expanding=True))


@lru_cache(maxsize=8)
def statements(
    *,
    dialect: str,
    event_window_s: float,
    throttle_window_s: float,
    ib_flap_downs: int = 2,
    ib_flap_window_s: float = 3600.0,
) -> Statements:
    """The statements for the ``dialect`` (its name) and these windows (seconds)."""
    nodes = select(Node.id.label("id")).where(_of_ids(Node.id, dialect)).subquery("owners")
    gpus = select(Gpu.id.label("id")).where(_of_ids(Gpu.node_id, dialect)).subquery("owners")
    d, n, nvl = latest.DISK.table.c, latest.NFS.table.c, latest.NVLINK.table.c
    d_cols, n_cols = ["node_id", "device", "sampled_at"], ["node_id", "mountpoint", "sampled_at"]
    return Statements(
        events=select(
            NodeEvent.node_id,
            NodeEvent.gpu_id,
            NodeEvent.kind,
            NodeEvent.xid,
            NodeEvent.occurred_at,
            NodeEvent.pci_bus_id,
            NodeEvent.message,
            NodeEvent.test,
        )
        .where(
            _of_ids(NodeEvent.node_id, dialect),
            NodeEvent.occurred_at >= bindparam("since", type_=UTCDateTime()),
            or_(NodeEvent.kind == "xid", NodeEvent.kind.in_(LOST_EVENT_KINDS)),
        )
        .order_by(NodeEvent.occurred_at, NodeEvent.id),
        history=select(
            NodeEvent.gpu_id,
            NodeEvent.kind,
            NodeEvent.xid,
            NodeEvent.occurred_at,
        ).where(
            _of_ids(NodeEvent.node_id, dialect),
            NodeEvent.occurred_at >= bindparam("since", type_=UTCDateTime()),
            NodeEvent.gpu_id.is_not(None),
            or_(NodeEvent.kind == "xid", NodeEvent.kind.in_(LOST_EVENT_KINDS)),
            NodeEvent.test.is_(False),  # a self-test never climbs the escalation ladder
        ),
        throttle=gpu_history.bit_counts(
            "clocks_event_reasons",
            (THERMAL_BITS, HEALTH_POWER_BITS),
            window_s=throttle_window_s,
            dialect=dialect,
            nodes=lambda node_id: _of_ids(node_id, dialect),
        ),
        links=latest.current_of(
            latest.NVLINK,
            owners=gpus,
            columns=["gpu_id", "link", "sampled_at"],
            window_start=_window,
            few=True,
        )
        .where(nvl.state == "down")
        .order_by(nvl.gpu_id, nvl.link),
        ports=port_history.ports_down(nodes, window_start=_window, event_window_s=event_window_s),
        ports_gone=port_history.gone(
            latest.NIC,
            nodes,
            columns=["node_id", "device", "port", "state", "sampled_at"],
            after_s=LATEST_WINDOW_S,
            event_window_s=event_window_s,
        ),
        links_gone=port_history.gone(
            latest.NVLINK,
            gpus,
            columns=["gpu_id", "link", "sampled_at"],
            after_s=LATEST_WINDOW_S,
            event_window_s=event_window_s,
        ),
        flapping=port_history.ports_flapping(
            nodes, window_start=_window, min_downs=ib_flap_downs, flap_window_s=ib_flap_window_s
        ),
        disks=latest.current_of(
            latest.DISK,
            owners=nodes,
            columns=[*d_cols, "avg_wait_s"],
            window_start=_window,
            few=True,
        ).where(d.avg_wait_s > bindparam("disk_wait_s")),
        nfs=latest.current_of(
            latest.NFS,
            owners=nodes,
            columns=[*n_cols, "avg_rtt_s"],
            window_start=_window,
            few=True,
        ).where(n.avg_rtt_s > bindparam("nfs_rtt_s")),
    )
