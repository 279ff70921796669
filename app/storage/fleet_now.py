"""The ``/storage`` page's "now" tables: the newest reading of every disk, mount, NFS mount and
IB port of the chosen nodes (one query per table, not one per node), ranked. Counter rises over
the range come from :func:`app.storage.fleet_service.counter_chart`, which reads rollups."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.orm import Session

from app.nics.models import NicPortSample
from app.rollups import specs as rollup_specs
from app.rollups.specs import read_mark
from app.storage.fleet_service import CounterTotal, NodeScope
from app.storage.models import DiskSample, MountSample, NfsSample
from app.timeseries import LATEST_WINDOW_S, natural_key

_PARTITION = re.compile(r"^(.*\d)p\d+$|^(.*\D)\d+$")


#: Rows this recent are read raw for the "now" tables; older keys (an agent stopped a few
#: minutes ago) are found through the minute rollups, seconds.
RECENT_S = 60.0
_SPECS: dict[Any, rollup_specs.Spec] = {
    DiskSample: rollup_specs.DISK,
    NfsSample: rollup_specs.NFS,
    NicPortSample: rollup_specs.NIC,
}


def latest_rows(
    session: Session, model: type[Any], keys: tuple[str, ...], scope: NodeScope, now: datetime
) -> list[Any]:
    """The newest row of each (node, ``keys``…) of ``model`` reported within
    :data:`~app.timeseries.LATEST_WINDOW_S` before ``now`` (older ones are gone or stale), as
    rows with ``model``'s columns as attributes (not ORM objects).

    Where the table has rollups folded up to a recent mark, only the last :data:`RECENT_S`
    (or since the mark) of raw rows are grouped; keys whose newest row is older are found in
    the narrower 1-minute rollup and only their nodes' raw rows are read. Results are kept on
    the session for the same arguments (the disk table feeds two tables of one page)."""
    cache: dict[Any, list[Any]] = session.info.setdefault("fleet_now.latest_rows", {})
    cache_key = (model, keys, id(scope), now)
    if cache_key not in cache:
        cache[cache_key] = _latest(session, model, keys, scope, now)
    return cache[cache_key]


def _latest(
    session: Session, model: Any, keys: tuple[str, ...], scope: NodeScope, now: datetime
) -> list[Any]:
    window_start = now - timedelta(seconds=LATEST_WINDOW_S)
    spec = _SPECS.get(model)
    horizon = read_mark(session, spec.horizon_key) if spec else None
    if spec is None or horizon is None or horizon <= window_start:
        return _newest_in(session, model, keys, scope, window_start)
    recent_from = min(now - timedelta(seconds=RECENT_S), horizon)
    rows = _newest_in(session, model, keys, scope, recent_from)
    found = {(r.node_id, *(getattr(r, k) for k in keys)) for r in rows}
    table = spec.tables[60]
    seen = (
        select(table.c.node_id, *(table.c[k] for k in keys))
        .where(
            scope.where(table.c.node_id),
            table.c.bucket_start_s >= math.floor(window_start.timestamp() / 60) * 60,
        )
        .group_by(table.c.node_id, *(table.c[k] for k in keys))
    )
    stale = {tuple(r) for r in session.execute(seen)} - found
    if not stale:
        return rows
    nodes = NodeScope({key[0]: "" for key in stale}, filtered=True)
    older = _newest_in(session, model, keys, nodes, window_start, before=recent_from)
    older = [r for r in older if (r.node_id, *(getattr(r, k) for k in keys)) in stale]
    return [*rows, *(r for r in older if r.node_id in scope.hostnames)]


def _newest_in(
    session: Session,
    model: Any,
    keys: tuple[str, ...],
    scope: NodeScope,
    since: datetime,
    *,
    before: datetime | None = None,
) -> list[Any]:
    """The newest row of each (node, ``keys``…) among rows sampled in ``[since, before)``, as
    plain rows with the table's columns as attributes (no ORM objects: 8,000 IB ports a
    request). Postgres: ``DISTINCT ON``; elsewhere the newest time per key joined back."""
    table = model.__table__
    cols = [table.c[k] for k in keys]
    window = [table.c.sampled_at >= since]
    if before is not None:
        window.append(table.c.sampled_at < before)
    if session.get_bind().dialect.name == "postgresql":
        stmt = (
            select(table)
            .ext(distinct_on(table.c.node_id, *cols))
            .where(scope.where(table.c.node_id), *window)
            .order_by(table.c.node_id, *cols, table.c.sampled_at.desc())
        )
    else:
        newest = (
            select(table.c.node_id, *cols, func.max(table.c.sampled_at).label("newest_at"))
            .where(scope.where(table.c.node_id), *window)
            .group_by(table.c.node_id, *cols)
            .subquery()
        )
        on = and_(
            table.c.node_id == newest.c.node_id,
            table.c.sampled_at == newest.c.newest_at,
            *(c == newest.c[c.key] for c in cols),
        )
        stmt = select(table).join(newest, on)
    return [r for r in session.execute(stmt) if r.node_id in scope.hostnames]


def _matches(match: str, *texts: str | None) -> bool:
    return not match or any(match.lower() in (t or "").lower() for t in texts)


@dataclass(frozen=True)
class MountLatency:
    """A mount's latency per operation now: NFS READ/WRITE round trip (``avg_rtt_s``), or for a
    local filesystem its block device's ``avg_wait_s`` (iostats.rst: Δ ms reading + writing ÷
    Δ reads + writes)."""

    hostname: str
    mountpoint: str
    kind: str
    source: str | None
    latency_s: float
    ops_per_s: float | None


def disk_of(device: str | None, disks: dict[str, DiskSample]) -> DiskSample | None:
    """The disk reading behind a mount's source: ``/dev/md0`` → ``md0``; a partition
    (``/dev/nvme0n1p2``, ``/dev/sda1``) → its whole device when the agent left the partition out."""
    if not device or not device.startswith("/dev/"):
        return None
    name = device.removeprefix("/dev/")
    if name in disks:
        return disks[name]
    found = _PARTITION.match(name)
    parent = found and (found.group(1) or found.group(2))
    return disks.get(parent) if parent else None


def slowest_mounts(
    session: Session, scope: NodeScope, now: datetime, *, match: str = "", limit: int = 20
) -> list[MountLatency]:
    """Mounts by latency per operation, slowest first (mounts without one left out)."""
    found: list[MountLatency] = []
    for n in latest_rows(session, NfsSample, ("mountpoint",), scope, now):
        if n.avg_rtt_s is not None and _matches(match, n.mountpoint, n.export):
            host = scope.hostnames[n.node_id]
            found.append(
                MountLatency(host, n.mountpoint, "NFS", n.export, n.avg_rtt_s, n.ops_per_s)
            )
    disks: dict[int, dict[str, DiskSample]] = {}
    for d in latest_rows(session, DiskSample, ("device",), scope, now):
        disks.setdefault(d.node_id, {})[d.device] = d
    for mount in latest_rows(session, MountSample, ("mountpoint",), scope, now):
        disk = disk_of(mount.device, disks.get(mount.node_id, {}))
        if disk is None or disk.avg_wait_s is None:
            continue
        if not _matches(match, mount.mountpoint, mount.device):
            continue
        iops = None
        if disk.read_iops is not None and disk.write_iops is not None:
            iops = disk.read_iops + disk.write_iops
        found.append(
            MountLatency(
                scope.hostnames[mount.node_id],
                mount.mountpoint,
                mount.fstype or "local",
                mount.device,
                disk.avg_wait_s,
                iops,
            )
        )
    found.sort(key=lambda m: (-m.latency_s, m.hostname, m.mountpoint))
    return found[:limit]


def busiest_devices(
    session: Session, scope: NodeScope, now: datetime, *, match: str = "", limit: int = 20
) -> list[tuple[str, DiskSample]]:
    """``(hostname, disk)`` by read + write bytes/s, busiest first (unknown rates count 0)."""
    rows = [
        (scope.hostnames[d.node_id], d)
        for d in latest_rows(session, DiskSample, ("device",), scope, now)
        if _matches(match, d.device)
    ]
    rows.sort(
        key=lambda hd: (
            -((hd[1].read_bytes_per_s or 0.0) + (hd[1].write_bytes_per_s or 0.0)),
            hd[0],
            natural_key(hd[1].device),
        )
    )
    return rows[:limit]


@dataclass(frozen=True)
class PortProblem:
    """An IB port that is not ``ACTIVE`` now, or whose error counters rose in the range
    (``errors``: the increase, resets excluded; ``gaps``: intervals lost to resets)."""

    hostname: str
    port: str
    state: str | None
    phys_state: str | None
    errors: int
    gaps: int


def port_problems(
    session: Session,
    scope: NodeScope,
    now: datetime,
    rising: list[CounterTotal],
    *,
    match: str = "",
) -> list[PortProblem]:
    """Ports down now first (by host and port), then ports with rising errors, most first."""
    latest = {
        (scope.hostnames[p.node_id], f"{p.device}/{p.port}"): p
        for p in latest_rows(session, NicPortSample, ("device", "port"), scope, now)
        if _matches(match, p.device)
    }
    totals = {(t.hostname, t.item): t for t in rising if t.total > 0}
    problems = []
    for key in set(latest) | set(totals):
        port = latest.get(key)
        state = port.state if port else None
        down = state is not None and state.upper() != "ACTIVE"
        if not down and key not in totals:
            continue
        t = totals.get(key)
        problems.append(
            PortProblem(
                key[0],
                key[1],
                state,
                port.phys_state if port else None,
                t.total if t else 0,
                t.gaps if t else 0,
            )
        )
    problems.sort(
        key=lambda p: ((p.state or "").upper() == "ACTIVE", -p.errors, p.hostname, p.port)
    )
    return problems
