"""The current reading of each NVLink, IB port, disk, mount and NFS mount of a node, as plain
values (:mod:`app.series.latest` holds them; this module hands them out).

Each reading has the columns of its sample table as attributes, in the table's units: rates in
bytes per second, ``speed_gbps`` in GB/s as nvidia-smi prints it, ``rate_gbps`` in Gb/s as
sysfs does, cumulative counters as integers (NFS ones exact to 2⁶⁴−1), ``sampled_at`` the
agent's UTC time of the reading.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy.orm import Session

from app.series import latest
from app.series.writes import natural_key


@dataclass(frozen=True, slots=True)
class NvlinkReading:
    """One NVLink of a GPU (``nvmlDeviceGetNvLinkState``, ``…RemotePciInfo``,
    ``…RemoteDeviceType``, throughput field values, ``…GetNvLinkErrorCounter``): ``state`` is
    ``up``, ``down`` or another word the agent sent."""

    gpu_id: int
    link: int
    sampled_at: datetime
    state: str
    speed_gbps: float | None = None
    remote_pci_bus_id: str | None = None
    remote_device_type: str | None = None
    tx_bytes_per_s: float | None = None
    rx_bytes_per_s: float | None = None
    crc_errors: int | None = None
    replay_errors: int | None = None
    recovery_errors: int | None = None


@dataclass(frozen=True, slots=True)
class NicPortReading:
    """One InfiniBand/RoCE port (``/sys/class/infiniband/<device>/ports/<port>/``): ``state``
    and ``phys_state`` are sysfs' words (``ACTIVE``, ``LinkUp``, ``Polling`` …); the
    ``*_count`` values are the cumulative port counters."""

    node_id: int
    device: str
    port: int
    sampled_at: datetime
    link_layer: str | None = None
    state: str | None = None
    phys_state: str | None = None
    rate_gbps: float | None = None
    tx_bytes_per_s: float | None = None
    rx_bytes_per_s: float | None = None
    symbol_error_count: int | None = None
    link_downed_count: int | None = None
    link_error_recovery_count: int | None = None
    port_rcv_errors_count: int | None = None
    port_xmit_discards_count: int | None = None


@dataclass(frozen=True, slots=True)
class DiskReading:
    """A block device's rates over the agent's last interval (``/proc/diskstats``)."""

    node_id: int
    device: str
    sampled_at: datetime
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    read_iops: float | None = None
    write_iops: float | None = None
    busy_pct: float | None = None
    avg_wait_s: float | None = None


@dataclass(frozen=True, slots=True)
class MountReading:
    """A mounted filesystem's usage (``/proc/self/mountinfo`` and ``statvfs``)."""

    node_id: int
    mountpoint: str
    sampled_at: datetime
    device: str | None = None
    fstype: str | None = None
    used_bytes: int | None = None
    total_bytes: int | None = None

    @property
    def used_pct(self) -> float | None:
        """Used ÷ total in percent; None when either is unknown or the size is 0."""
        if self.used_bytes is None or not self.total_bytes:
            return None
        return 100.0 * self.used_bytes / self.total_bytes


@dataclass(frozen=True, slots=True)
class NfsReading:
    """An NFS mount (``/proc/self/mountstats``): the kernel's cumulative 64-bit counters and
    the rates over the agent's last interval."""

    node_id: int
    mountpoint: str
    sampled_at: datetime
    export: str | None = None
    version: str | None = None
    read_bytes: int | None = None
    write_bytes: int | None = None
    ops: int | None = None
    retransmits: int | None = None
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    ops_per_s: float | None = None
    retransmits_per_s: float | None = None
    avg_rtt_s: float | None = None


Reading = TypeVar("Reading", NvlinkReading, NicPortReading, DiskReading, MountReading, NfsReading)


def _current(
    session: Session,
    spec: latest.LatestSpec,
    kind: type[Reading],
    owner_ids: Collection[int],
    window_s: float,
) -> list[Reading]:
    rows = latest.of_owners(session, spec, owner_ids, window_s=window_s)
    return [kind(**row._mapping) for row in rows]


def nvlinks(session: Session, gpu_ids: Collection[int], *, window_s: float) -> list[NvlinkReading]:
    """Each link of ``gpu_ids`` read within ``window_s`` of its GPU's newest link reading,
    ordered by GPU id and link number."""
    links = _current(session, latest.NVLINK, NvlinkReading, gpu_ids, window_s)
    return sorted(links, key=lambda s: (s.gpu_id, s.link))


def nic_ports(session: Session, node_id: int, *, window_s: float) -> list[NicPortReading]:
    """Each (device, port) of the node read within ``window_s`` of its newest port reading,
    ordered by device and port (``mlx5_2`` before ``mlx5_10``)."""
    ports = _current(session, latest.NIC, NicPortReading, [node_id], window_s)
    return sorted(ports, key=lambda p: (natural_key(p.device), p.port))


def disks(session: Session, node_id: int, *, window_s: float) -> list[DiskReading]:
    """Each block device of the node (as :func:`nic_ports`), ordered by device name."""
    found = _current(session, latest.DISK, DiskReading, [node_id], window_s)
    return sorted(found, key=lambda d: natural_key(d.device))


def mounts(session: Session, node_id: int, *, window_s: float) -> list[MountReading]:
    """Each mounted filesystem of the node (as :func:`nic_ports`), ordered by mountpoint."""
    found = _current(session, latest.MOUNT, MountReading, [node_id], window_s)
    return sorted(found, key=lambda m: m.mountpoint)


def nfs_mounts(session: Session, node_id: int, *, window_s: float) -> list[NfsReading]:
    """Each NFS mount of the node (as :func:`nic_ports`), ordered by mountpoint."""
    found = _current(session, latest.NFS, NfsReading, [node_id], window_s)
    return sorted(found, key=lambda m: m.mountpoint)
