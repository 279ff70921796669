"""Storage and network host sources of the node agent (standard library only).

=====================  ================  ==========================================
source                 section           reads
=====================  ================  ==========================================
:class:`DiskStatsSource`  ``disks``       ``<procfs>/diskstats``
:class:`MountSource`      ``mounts``      ``<procfs>/self/mountinfo`` + ``statvfs``
:class:`NfsSource`        ``nfs_mounts``  ``<procfs>/self/mountstats``
:class:`InfinibandSource` ``nic_ports``   ``<sysfs>/class/infiniband/*/ports/*/``
=====================  ================  ==========================================

The pure parsers (``parse_diskstats``, ``parse_mountinfo``, ``parse_mountstats``,
``parse_ibstat``, ``parse_ibstatus``, ``parse_net_pairs``, ``parse_rpc_nfs``) live in the
modules beside them.
"""

from __future__ import annotations

from pathlib import Path

from agents.collectors.host import HostSource
from agents.host.diskstats import DiskFilter, DiskStatsSource
from agents.host.infiniband import InfinibandSource
from agents.host.mounts import MountFilter, MountSource
from agents.host.nfs import NfsSource

__all__ = [
    "DiskFilter",
    "DiskStatsSource",
    "InfinibandSource",
    "MountFilter",
    "MountSource",
    "NfsSource",
    "storage_and_network_sources",
]


def storage_and_network_sources(
    procfs: Path = Path("/proc"),
    sysfs: Path = Path("/sys"),
    rootfs: Path = Path("/"),
    pid: str = "self",
) -> list[HostSource]:
    """The four sources with their default filters, reading under ``procfs``/``sysfs``
    (node_exporter's ``--path.procfs``/``--path.sysfs``/``--path.rootfs``); the mount tables
    are those of process ``pid`` (``"1"`` for the host's from inside a container)."""
    return [
        DiskStatsSource(procfs),
        MountSource(procfs, rootfs=rootfs, pid=pid),
        NfsSource(procfs, pid=pid),
        InfinibandSource(sysfs),
    ]
