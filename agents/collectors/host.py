"""Host sources: what an agent reads about the node besides its GPUs (storage, NICs, the
kernel log). Each is independent of the GPU collector, so a node without a driver still reports
its disks, mounts and InfiniBand ports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any

from agents.payload import EventDict

#: The payload sections a host source may fill (see docs/ingest.md, "Node sections").
HOST_SECTIONS = ("disks", "mounts", "nfs_mounts", "nic_ports")


class HostSource(ABC):
    """One source of node data. Never raises for a missing file or device: what it cannot read
    it leaves out and reports through :meth:`collection_errors`."""

    #: A short name for logs and collection errors, e.g. ``"diskstats"``.
    name: str = ""

    @abstractmethod
    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """Read once and return entries dated ``now`` by section name (keys from
        :data:`HOST_SECTIONS`)."""

    def drain_events(self) -> list[EventDict]:
        """Return the events seen since the last call (kernel Xid lines …); default none."""
        return []

    def urgent_pending(self) -> bool:
        """Whether events that must be sent at once arrived since the last round (see
        :meth:`agents.collectors.base.Collector.urgent_pending`: must not block); default no."""
        return False

    def topology_devices(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """Return ``(devices, links)`` this source adds to the topology (NICs and their PCI
        distance to GPUs), or ``None``; default none."""
        return None

    def collection_errors(self) -> list[dict[str, str]]:
        """Return and forget the errors since the last call; default none."""
        return []
