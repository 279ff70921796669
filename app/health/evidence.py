"""What the health checks read, loaded for any number of nodes in six statements (events,
throttling, NVLinks, IB ports, disks, NFS mounts), whatever the fleet size or its freshness,
and a seventh for the nodes with Xid or lost-GPU events: those events over the escalation
window, from which :mod:`app.health.actions` counts repeats.

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
from app.health import reasons
from app.health.rules import LOST_EVENT_KINDS, HealthRules
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

    #: node id → events in the window (node_id, gpu_id, kind, xid, occurred_at, pci_bus_id,
    #: message, test), oldest first: Xid events and lost-GPU events (self-test ones within the
    #: self-test window only).
    events: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: (GPU id, reason code ``xid_<n>`` or ``gpu_lost``) → when it occurred within the
    #: escalation window, for the nodes with events in the event window (any order).
    history: dict[tuple[int, str], list[datetime]] = field(
        default_factory=lambda: defaultdict(list)
    )
    #: GPU id → its throttling counts.
    throttle: dict[int, Throttle] = field(default_factory=dict)
    #: GPU id → its down links (link, sampled_at), by link number.
    links_down: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → ports not ACTIVE that were ACTIVE in the window (device, port, state, since).
    ports_down: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → ports that stopped reporting while the node's others go on (device, port,
    #: state, sampled_at: the last reading), within the event window.
    ports_gone: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: GPU id → NVLinks that stopped reporting while the GPU's others go on (link, sampled_at).
    links_gone: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → ACTIVE ports whose link went down ``ib_flap_downs``+ times within
    #: ``ib_flap_window_s`` (device, port, downs).
    ports_flapping: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → newest disk readings over the wait threshold (device, avg_wait_s, sampled_at).
    slow_disks: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))
    #: node id → newest NFS readings over the RTT threshold (mountpoint, avg_rtt_s, sampled_at);
    #: the checks sort disks and mounts (Python's order, not the database collation).
    slow_nfs: dict[int, list[Any]] = field(default_factory=lambda: defaultdict(list))


def load_evidence(
    session: Session, *, views: list[NodeView], rules: HealthRules, now: datetime
) -> Evidence:
    """The evidence of every node of ``views`` that has reported at least once (a never-seen
    node has nothing to check): nine statements, none when there is no such node."""
    found = Evidence()
    ids = sorted({v.node.id for v in views if v.freshness != "never_seen"})
    if not ids:
        return found
    sql = statements(
        dialect=session.get_bind().dialect.name,
        event_window_s=rules.event_window_s,
        throttle_window_s=rules.throttle_window_s,
        ib_flap_downs=rules.ib_flap_downs,
        ib_flap_window_s=rules.ib_flap_window_s,
    )
    since = now - timedelta(seconds=rules.event_window_s)
    tests_since = now - timedelta(seconds=rules.self_test_window_s)
    for row in session.execute(sql.events, {"ids": ids, "since": since}):
        if row.test and row.occurred_at < tests_since:
            continue  # a self-test fault counts for the self-test window only
        found.events[row.node_id].append(row)
    if found.events:
        with_events = sorted(found.events)
        back = now - timedelta(seconds=max(rules.escalation_window_s, 0))
        rows: Any = (
            session.execute(sql.history, {"ids": with_events, "since": back})
            if rules.escalation_window_s > rules.event_window_s
            else (
                r
                for n in with_events
                for r in found.events[n]
                if r.occurred_at >= back and not r.test
            )
        )
        for row in rows:
            if row.gpu_id is None:
                continue
            if row.kind in LOST_EVENT_KINDS:
                found.history[(row.gpu_id, reasons.GPU_LOST)].append(row.occurred_at)
            elif row.xid is not None:
                found.history[(row.gpu_id, reasons.xid_code(row.xid))].append(row.occurred_at)
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
    for row in session.execute(sql.ports_gone, {"ids": ids}):
        found.ports_gone[row.node_id].append(row)
    for row in session.execute(sql.links_gone, {"ids": ids}):
        found.links_gone[row.gpu_id].append(row)
    for row in session.execute(sql.flapping, {"ids": ids}):
        found.ports_flapping[row.node_id].append(row)
    for row in session.execute(sql.disks, {"ids": ids, "disk_wait_s": rules.disk_wait_s}):
        found.slow_disks[row.node_id].append(row)
    for row in session.execute(sql.nfs, {"ids": ids, "nfs_rtt_s": rules.nfs_rtt_s}):
        found.slow_nfs[row.node_id].append(row)
    return found
