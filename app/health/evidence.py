"""What the health checks read, loaded for any number of nodes in six statements (events,
throttling, NVLinks, IB ports, disks, NFS mounts), whatever the fleet size or its freshness.

Each statement returns only rows that can become a reason (a down link, a slow disk …) or, for
throttling, one aggregate row per GPU, so its size follows the problems, not the fleet.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.fleet.service import NodeView
from app.health.rules import HealthRules
from app.health.statements import statements


@dataclass(frozen=True)
class Throttle:
    """One GPU's samples with a ``clocks_event_reasons`` value over the throttle window: how
    many, how many had a thermal / power bit set, and the first of those."""

    samples: int
    thermal: int
    thermal_since: datetime | None
    power: int
    power_since: datetime | None


@dataclass
class Evidence:
    """The rows the checks read, by node id (or GPU id). Rows are SQLAlchemy ``Row`` objects
    with the named columns below; lists are in the order the checks report them."""

    #: node id → events in the window (node_id, gpu_id, kind, xid, occurred_at, pci_bus_id),
    #: oldest first: Xid events and lost-GPU events.
    events: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: GPU id → its throttling counts.
    throttle: dict[int, Throttle] = field(default_factory=dict)
    #: GPU id → its down links (link, sampled_at), by link number.
    links_down: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → ports not ACTIVE that were ACTIVE in the window (device, port, state, since).
    ports_down: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → newest disk readings over the wait threshold (device, avg_wait_s, sampled_at).
    slow_disks: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → newest NFS readings over the RTT threshold (mountpoint, avg_rtt_s, sampled_at);
    #: the checks sort disks and mounts (Python's order, not the database collation).
    slow_nfs: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))


def load_evidence(
    session: Session, *, views: list[NodeView], rules: HealthRules, now: datetime
) -> Evidence:
    """The evidence of every node of ``views`` that has reported at least once (a never-seen
    node has nothing to check): six statements, none when there is no such node."""
    found = Evidence()
    ids = sorted({v.node.id for v in views if v.freshness != "never_seen"})
    if not ids:
        return found
    sql = statements(
        dialect=session.get_bind().dialect.name,
        event_window_s=rules.event_window_s,
        throttle_window_s=rules.throttle_window_s,
    )
    since = now - timedelta(seconds=rules.event_window_s)
    for row in session.execute(sql.events, {"ids": ids, "since": since}):
        found.events[row.node_id].append(row)
    for gpu_id, samples, n_thermal, thermal_at, n_power, power_at in session.execute(
        sql.throttle, {"ids": ids}
    ):
        found.throttle[gpu_id] = Throttle(
            int(samples), int(n_thermal), thermal_at, int(n_power), power_at
        )
    for row in session.execute(sql.links, {"ids": ids}):
        found.links_down[row.gpu_id].append(row)
    for row in session.execute(sql.ports, {"ids": ids}):
        found.ports_down[row.node_id].append(row)
    for row in session.execute(sql.disks, {"ids": ids, "disk_wait_s": rules.disk_wait_s}):
        found.slow_disks[row.node_id].append(row)
    for row in session.execute(sql.nfs, {"ids": ids, "nfs_rtt_s": rules.nfs_rtt_s}):
        found.slow_nfs[row.node_id].append(row)
    return found
