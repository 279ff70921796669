"""The six statements of :func:`app.health.evidence.load_evidence`, built once per pair of
windows and reused (building and cache-keying them costs more than running them on a small
fleet). Parameters: ``ids`` (node ids: an array on Postgres, expanding elsewhere), ``since``
(events), ``disk_wait_s`` and ``nfs_rtt_s`` (thresholds)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    Executable,
    Integer,
    Select,
    any_,
    bindparam,
    case,
    func,
    or_,
    select,
    true,
)

from app.db import UTCDateTime
from app.events import models as event_models
from app.fleet import models as fleet_models
from app.health.rules import LOST_EVENT_KINDS, POWER_BITS, THERMAL_BITS
from app.health.sql import before
from app.metrics.models import gpu_sample
from app.nics import models as nic_models
from app.series import latest
from app.timeseries import LATEST_WINDOW_S

# Core tables, not ORM entities: the statements compile in about half the time (the first
# request of a process compiles them).
NodeEvent = event_models.NodeEvent.__table__.c
Node = fleet_models.Node.__table__.c
Gpu = fleet_models.Gpu.__table__.c
NicPortSample = nic_models.NicPortSample.__table__


def _window(newest: Any) -> Any:
    """The start of a node's current window: its newest reading minus
    :data:`~app.timeseries.LATEST_WINDOW_S` (an entity quiet for longer is gone)."""
    return before(newest, LATEST_WINDOW_S)


@dataclass(frozen=True)
class Statements:
    """One statement per kind of evidence (columns as :class:`~app.health.evidence.Evidence`
    documents them)."""

    events: Executable
    throttle: Executable
    links: Executable
    ports: Executable
    disks: Executable
    nfs: Executable


def _of_ids(column: Any, dialect: str) -> Any:
    """``column`` is one of the ``ids`` parameter: one array parameter on Postgres (an
    expanded ``IN`` of 1,000 ids costs more to render and parse than to run), else ``IN``."""
    if dialect == "postgresql":
        return column == any_(bindparam("ids", type_=ARRAY(Integer)))
    return column.in_(bindparam("ids", expanding=True))


@lru_cache(maxsize=8)
def statements(*, dialect: str, event_window_s: float, throttle_window_s: float) -> Statements:
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
        )
        .where(
            _of_ids(NodeEvent.node_id, dialect),
            NodeEvent.occurred_at >= bindparam("since", type_=UTCDateTime()),
            or_(NodeEvent.kind == "xid", NodeEvent.kind.in_(LOST_EVENT_KINDS)),
        )
        .order_by(NodeEvent.occurred_at, NodeEvent.id),
        throttle=_throttle(throttle_window_s, dialect),
        links=latest.current_of(
            latest.NVLINK,
            owners=gpus,
            columns=["gpu_id", "link", "sampled_at"],
            window_start=_window,
            few=True,
        )
        .where(nvl.state == "down")
        .order_by(nvl.gpu_id, nvl.link),
        ports=_ports(nodes, event_window_s),
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


def _throttle(window_s: float, dialect: str) -> Select[Any]:
    """Per GPU, over the window ending at its node's newest sample (``node.last_sample_at``):
    samples with a ``clocks_event_reasons`` value, and for thermal and power bits how many
    have one set and the first of those."""
    bits = gpu_sample.c.clocks_event_reasons
    at = gpu_sample.c.sampled_at
    thermal = bits.op("&")(THERMAL_BITS) != 0
    power = bits.op("&")(POWER_BITS) != 0
    counts = (
        func.count(),
        func.sum(case((thermal, 1), else_=0)),
        func.min(case((thermal, at))),
        func.sum(case((power, 1), else_=0)),
        func.min(case((power, at))),
    )
    if dialect == "postgresql":
        # One index range scan of (gpu_id, sampled_at) per GPU, forced by LATERAL: joined,
        # Postgres read the whole table (2.2 s for 1,000 nodes × 2 h; 0.44 s this way).
        bounds = (
            select(Gpu.id.label("gpu_id"), before(Node.last_sample_at, window_s).label("lo"))
            .join(Node.id.table, Node.id == Gpu.node_id)
            .where(_of_ids(Node.id, dialect))
            .cte("throttle_bounds")
            .prefix_with("MATERIALIZED")
        )
        per_gpu = (
            select(*(c.label(f"c{i}") for i, c in enumerate(counts)))
            .where(gpu_sample.c.gpu_id == bounds.c.gpu_id, at >= bounds.c.lo, bits.is_not(None))
            .lateral("per_gpu")
        )
        return (
            select(bounds.c.gpu_id, *per_gpu.c)
            .select_from(bounds)
            .join(per_gpu, true())
            .where(per_gpu.c.c0 > 0)
        )
    return (
        select(gpu_sample.c.gpu_id, *counts)
        .join(Gpu.id.table, Gpu.id == gpu_sample.c.gpu_id)
        .join(Node.id.table, Node.id == Gpu.node_id)
        .where(
            _of_ids(Node.id, dialect),
            at >= before(Node.last_sample_at, window_s),
            bits.is_not(None),
        )
        .group_by(gpu_sample.c.gpu_id)
    )


def _ports(nodes: Any, event_window_s: float) -> Select[Any]:
    """Current reading of each port not ACTIVE (:mod:`app.series.latest`), the last ACTIVE
    reading within the event window before it, and the first reading after that one (when the
    port went down), from the port's raw readings."""
    p = latest.NIC.table.c
    down = (
        latest.current_of(
            latest.NIC,
            owners=nodes,
            columns=["node_id", "device", "port", "state", "sampled_at"],
            window_start=_window,
            few=True,
        )
        .where(or_(p.state.is_(None), func.upper(p.state) != "ACTIVE"))
        .subquery("down")
    )
    up = NicPortSample.alias("up").c
    last_up = (
        select(func.max(up.sampled_at))
        .where(
            up.node_id == down.c.node_id,
            up.device == down.c.device,
            up.port == down.c.port,
            up.sampled_at >= before(down.c.sampled_at, event_window_s),
            func.upper(up.state) == "ACTIVE",
        )
        .scalar_subquery()
    )
    with_up = select(down, last_up.label("last_up")).subquery("with_up")
    after = NicPortSample.alias("after").c
    since = (
        select(func.min(after.sampled_at))
        .where(
            after.node_id == with_up.c.node_id,
            after.device == with_up.c.device,
            after.port == with_up.c.port,
            after.sampled_at > with_up.c.last_up,
        )
        .scalar_subquery()
    )
    return select(
        with_up.c.node_id,
        with_up.c.device,
        with_up.c.port,
        with_up.c.state,
        since.label("since"),
    ).where(with_up.c.last_up.is_not(None))
