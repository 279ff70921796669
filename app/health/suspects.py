"""Which nodes could have each kind of health reason, found with one query per kind for the
whole fleet, so a fleet-wide evaluation runs the detailed per-node checks only where something
is there to find (300 nodes: from ~10 queries per node to ~5 plus a few per suspect node).

Each query is a superset of its check: a node left out of a set cannot have that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.events.models import NodeEvent
from app.fleet.service import NodeView
from app.health.rules import LOST_EVENT_KINDS, POWER_BITS, THERMAL_BITS, HealthRules
from app.metrics.models import gpu_sample
from app.nics.models import NicPortSample
from app.nvlinks.models import NvlinkSample
from app.storage.models import DiskSample, NfsSample
from app.timeseries import LATEST_WINDOW_S


@dataclass
class Suspects:
    """Node ids that may have a reason of each kind; only meaningful for the ``covered`` ones
    (fresh nodes), other nodes get every check."""

    covered: set[int] = field(default_factory=set)
    events: set[int] = field(default_factory=set)
    throttling: set[int] = field(default_factory=set)
    links: set[int] = field(default_factory=set)
    ports: set[int] = field(default_factory=set)
    storage: set[int] = field(default_factory=set)

    def may(self, kind: str, node_id: int) -> bool:
        """Whether the ``kind`` check must run for ``node_id``."""
        return node_id not in self.covered or node_id in getattr(self, kind)


def find_suspects(
    session: Session, *, views: list[NodeView], rules: HealthRules, now: datetime
) -> Suspects:
    """The suspects among the fresh nodes of ``views`` (latest readings are within
    ``LATEST_WINDOW_S`` of each node's newest sample, which is why that bounds the scans)."""
    fresh = [v for v in views if v.freshness == "fresh" and v.node.last_sample_at is not None]
    suspects = Suspects(covered={v.node.id for v in fresh})
    if not fresh:
        return suspects
    node_ids = list(suspects.covered)
    node_of_gpu = {g.gpu.id: v.node.id for v in fresh for g in v.gpus}
    oldest = min(v.node.last_sample_at for v in fresh if v.node.last_sample_at is not None)
    recent = oldest - timedelta(seconds=LATEST_WINDOW_S)

    suspects.events = set(
        session.scalars(
            select(NodeEvent.node_id)
            .where(
                NodeEvent.node_id.in_(node_ids),
                NodeEvent.occurred_at >= now - timedelta(seconds=rules.event_window_s),
                or_(NodeEvent.kind == "xid", NodeEvent.kind.in_(LOST_EVENT_KINDS)),
            )
            .distinct()
        )
    )
    if node_of_gpu:
        throttled = session.scalars(
            select(gpu_sample.c.gpu_id)
            .where(
                gpu_sample.c.gpu_id.in_(list(node_of_gpu)),
                gpu_sample.c.sampled_at >= oldest - timedelta(seconds=rules.throttle_window_s),
                gpu_sample.c.clocks_event_reasons.op("&")(THERMAL_BITS | POWER_BITS) != 0,
            )
            .distinct()
        )
        suspects.throttling = {node_of_gpu[g] for g in throttled}
        down = session.scalars(
            select(NvlinkSample.gpu_id)
            .where(
                NvlinkSample.gpu_id.in_(list(node_of_gpu)),
                NvlinkSample.sampled_at >= recent,
                NvlinkSample.state == "down",
            )
            .distinct()
        )
        suspects.links = {node_of_gpu[g] for g in down}
    suspects.ports = set(
        session.scalars(
            select(NicPortSample.node_id)
            .where(
                NicPortSample.node_id.in_(node_ids),
                NicPortSample.sampled_at >= recent,
                or_(NicPortSample.state.is_(None), func.upper(NicPortSample.state) != "ACTIVE"),
            )
            .distinct()
        )
    )
    slow_disks = select(DiskSample.node_id).where(
        DiskSample.node_id.in_(node_ids),
        DiskSample.sampled_at >= recent,
        DiskSample.avg_wait_s > rules.disk_wait_s,
    )
    slow_nfs = select(NfsSample.node_id).where(
        NfsSample.node_id.in_(node_ids),
        NfsSample.sampled_at >= recent,
        NfsSample.avg_rtt_s > rules.nfs_rtt_s,
    )
    suspects.storage = set(session.scalars(slow_disks.union(slow_nfs)))
    return suspects
