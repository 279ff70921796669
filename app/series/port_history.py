"""When each IB port that is not ``ACTIVE`` now went down, and which ``ACTIVE`` ports went down
and up again repeatedly (flapping), from their raw readings.

The current reading says a port is down; the time it went down is the first reading after its
last ``ACTIVE`` one, looked for within an event window (raw IB port readings are kept that long
before compaction: :func:`app.series.jobs.raw_spans_s`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, FromClause, Select, case, func, or_, select

from app.health.sql import before
from app.series import latest
from app.series.tables import NicPortSample


def ports_down(
    nodes: FromClause,
    *,
    window_start: Callable[[ColumnElement[Any]], ColumnElement[Any]],
    event_window_s: float,
) -> Select[Any]:
    """``node_id, device, port, state, since`` of each port of the nodes ``nodes.c.id`` whose
    current reading (:func:`app.series.latest.current_of` with ``window_start``) is not
    ``ACTIVE`` and that read ``ACTIVE`` within ``event_window_s`` before it; ``since`` is the
    first reading after that last ``ACTIVE`` one. Ports down for longer than the window are
    left out."""
    p = latest.NIC.table.c
    down = (
        latest.current_of(
            latest.NIC,
            owners=nodes,
            columns=["node_id", "device", "port", "state", "sampled_at"],
            window_start=window_start,
            few=True,
        )
        .where(or_(p.state.is_(None), func.upper(p.state) != "ACTIVE"))
        .subquery("down")
    )
    raw = NicPortSample.__table__
    up = raw.alias("up").c
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
    after = raw.alias("after").c
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


def ports_flapping(
    nodes: FromClause,
    *,
    window_start: Callable[[ColumnElement[Any]], ColumnElement[Any]],
    min_downs: int,
    flap_window_s: float,
) -> Select[Any]:
    """``node_id, device, port, downs`` of each current port of the nodes ``nodes.c.id``
    (:func:`app.series.latest.current_of` with ``window_start``; down now or not) whose link
    went down at least ``min_downs`` times within ``flap_window_s`` before its current reading
    (the window ends at the port's newest reading, as rule windows end at the node's newest
    sample), by ``link_downed_count`` (the IB LinkDownedCounter: one per time the link went
    down): the current count minus the first non-null one of the window; a counter that went
    back (reset with the driver) counts its current value, the downs since the reset.

    One index probe per current port (the raw key is node, device, port, time)."""
    p = latest.NIC.table.c
    now_ = (
        latest.current_of(
            latest.NIC,
            owners=nodes,
            columns=["node_id", "device", "port", "link_downed_count", "sampled_at"],
            window_start=window_start,
        )
        .where(p.link_downed_count.is_not(None))
        .subquery("now_")
    )
    raw = NicPortSample.__table__
    first = raw.alias("first").c
    then = (
        select(first.link_downed_count)
        .where(
            first.node_id == now_.c.node_id,
            first.device == now_.c.device,
            first.port == now_.c.port,
            first.sampled_at >= before(now_.c.sampled_at, flap_window_s),
            first.link_downed_count.is_not(None),
        )
        .order_by(first.sampled_at)
        .limit(1)
        .scalar_subquery()
    )
    with_then = select(now_, then.label("then")).subquery("with_then")
    current, start = with_then.c.link_downed_count, with_then.c.then
    downs = case((current >= start, current - start), else_=current)
    return select(
        with_then.c.node_id, with_then.c.device, with_then.c.port, downs.label("downs")
    ).where(start.is_not(None), downs >= min_downs)


def gone(
    spec: latest.LatestSpec,
    owners: FromClause,
    *,
    columns: list[str],
    after_s: float,
    event_window_s: float,
) -> Select[Any]:
    """``columns`` of the current rows of ``spec`` (IB ports of the nodes, NVLinks of the GPUs
    ``owners.c.id``) that stopped reporting while their owner's others go on: the entity's
    newest reading is more than ``after_s`` older than its owner's last full round, but within
    ``event_window_s`` of it (a port or link gone for longer is the owner's new inventory). A
    NIC whose driver failed, a port or link that vanished from sysfs or NVML: no reading says
    "down", the reading just stops.

    The last full round is the newest time at least two of the owner's entities were read
    together: the agent sends every entity each ``--host-interval`` / ``--nvlink-interval``
    and a changed one alone at once, so an entity merely unchanged since the last round is
    never counted gone, whatever the interval."""
    table = spec.table
    owner = table.c[spec.owner]
    times = (
        select(owner.label("owner_id"), table.c.sampled_at.label("at"))
        .where(owner.in_(select(owners.c.id)))
        .group_by(owner, table.c.sampled_at)
        .having(func.count() >= 2)
        .subquery("round_times")
    )
    rounds = (
        select(times.c.owner_id, func.max(times.c.at).label("full_at"))
        .group_by(times.c.owner_id)
        .subquery("full_rounds")
    )
    return (
        select(*(table.c[c] for c in columns))
        .join(rounds, rounds.c.owner_id == owner)
        .where(
            table.c.sampled_at < before(rounds.c.full_at, after_s),
            table.c.sampled_at >= before(rounds.c.full_at, event_window_s),
        )
    )
