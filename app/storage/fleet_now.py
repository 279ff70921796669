"""The ``/storage`` page's "now" tables: the newest reading of every disk, mount, NFS mount and
IB port of the chosen nodes (one query per table, not one per node), ranked. Counter rises over
the range come from :func:`app.storage.fleet_service.counter_chart`, which reads rollups."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, func, or_
from sqlalchemy.orm import Session

from app.series import latest as latest_store
from app.series.writes import LATEST_WINDOW_S, natural_key
from app.storage.fleet_service import CounterTotal, NodeScope

_PARTITION = re.compile(r"^(.*\d)p\d+$|^(.*\D)\d+$")


def latest_rows(
    session: Session,
    spec: latest_store.LatestSpec,
    scope: NodeScope,
    now: datetime,
    *,
    where: Sequence[ColumnElement[bool]] = (),
) -> list[Any]:
    """The current reading (:mod:`app.series.latest`) of each entity of ``spec`` (``DISK``,
    ``MOUNT``, ``NFS``, ``NIC``) on the scope's nodes, read within
    :data:`~app.series.writes.LATEST_WINDOW_S` before ``now`` (older ones are gone or stale) and
    matching ``where``, as rows with the reading's columns as attributes (not ORM objects).
    Without ``where``, results are kept on the session for the same arguments (the disk table
    feeds two tables of one page)."""
    cache: dict[Any, list[Any]] = session.info.setdefault("fleet_now.latest_rows", {})
    cache_key = (id(spec), id(scope), now)
    if where or cache_key not in cache:
        rows = latest_store.read(
            session,
            spec,
            since=now - timedelta(seconds=LATEST_WINDOW_S),
            node_ids=list(scope.hostnames) if scope.filtered else None,
            where=where,
        )
        found = [r for r in rows if r.node_id in scope.hostnames]
        if where:
            return found
        cache[cache_key] = found
    return cache[cache_key]


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


def disk_of(device: str | None, disks: dict[str, Any]) -> Any:
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
    for n in latest_rows(session, latest_store.NFS, scope, now):
        if n.avg_rtt_s is not None and _matches(match, n.mountpoint, n.export):
            host = scope.hostnames[n.node_id]
            found.append(
                MountLatency(host, n.mountpoint, "NFS", n.export, n.avg_rtt_s, n.ops_per_s)
            )
    disks: dict[int, dict[str, Any]] = {}
    for d in latest_rows(session, latest_store.DISK, scope, now):
        disks.setdefault(d.node_id, {})[d.device] = d
    for mount in latest_rows(session, latest_store.MOUNT, scope, now):
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
) -> list[tuple[str, Any]]:
    """``(hostname, disk)`` by read + write bytes/s, busiest first (unknown rates count 0)."""
    rows = [
        (scope.hostnames[d.node_id], d)
        for d in latest_rows(session, latest_store.DISK, scope, now)
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
    """Ports down now first (by host and port), then ports with rising errors, most first.
    Only the current rows of ports not ``ACTIVE`` and of the nodes with rising errors are read
    (8,000 ports at 1,000 nodes, a few of them of interest)."""
    node_of = {hostname: node_id for node_id, hostname in scope.hostnames.items()}
    rising_nodes = {node_of[t.hostname] for t in rising if t.total > 0 and t.hostname in node_of}
    cols = latest_store.NIC.table.c
    of_interest = or_(func.upper(cols.state) != "ACTIVE", cols.node_id.in_(sorted(rising_nodes)))
    latest = {
        (scope.hostnames[p.node_id], f"{p.device}/{p.port}"): p
        for p in latest_rows(session, latest_store.NIC, scope, now, where=[of_interest])
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
