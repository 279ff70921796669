"""NICs and their PCI distance to the GPUs, read from sysfs (what ``nvidia-smi topo -m`` shows
for ``NIC#`` rows, without needing nvidia-smi).

Sources: ``/sys/class/infiniband/<dev>/device`` (a symlink into ``/sys/devices/pci…``, whose last
component is the PCI address), ``/sys/class/infiniband/<dev>/ports/<n>/link_layer``
(``InfiniBand`` or ``Ethernet`` for RoCE) and ``/sys/bus/pci/devices/<addr>/numa_node`` (``-1``
when the platform does not say). The distance codes are computed by
:func:`agents.topology.pci.pci_distance` from the resolved device paths.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.collectors.host import HostSource
from agents.numbers import ascii_int
from agents.topology.pci import pci_distance, sysfs_bus_id

GpuBusIds = Sequence[str | None] | Callable[[], Sequence[str | None]]


_RUNS = re.compile(r"([0-9]+)")


def _natural(name: str) -> list[Any]:
    """``mlx5_2`` before ``mlx5_10``."""
    return [(0, n, "") if (n := ascii_int(p)) is not None else (1, 0, p) for p in _RUNS.split(name)]


class InfinibandTopology(HostSource):
    """Adds the RDMA NICs (``kind: nic``) and their NIC↔GPU and NIC↔NIC links to the topology.

    ``gpu_pci_bus_ids`` lists the GPUs' bus ids by GPU index (``GPU<index>`` in the topology), in
    NVML's or sysfs' spelling, ``None`` for a GPU whose id is unknown; or a callable returning
    that list, asked at each reading (GPUs can fall off the bus). NICs are numbered ``NIC0…`` in
    natural name order, as nvidia-smi numbers them.
    """

    name = "infiniband-topology"

    def __init__(self, sysfs: Path = Path("/sys"), gpu_pci_bus_ids: GpuBusIds = ()) -> None:
        self.sysfs = sysfs
        self._gpu_ids = gpu_pci_bus_ids
        self._errors: list[dict[str, str]] = []
        self._problems: set[str] = set()

    def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
        """Nothing per interval: this source only contributes to the topology."""
        return {}

    def collection_errors(self) -> list[dict[str, str]]:
        errors, self._errors = self._errors, []
        return errors

    def topology_devices(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """``(devices, links)``: one ``nic`` device per ``/sys/class/infiniband`` entry and its
        distance code to every GPU and to every later NIC; ``None`` when there is no NIC."""
        root = self.sysfs / "class" / "infiniband"
        try:
            names = sorted((p.name for p in root.iterdir()), key=_natural)
        except OSError:
            return None  # no RDMA stack loaded: nothing to add, nothing wrong
        gpus = self._gpu_paths()
        devices: list[dict[str, Any]] = []
        paths: list[tuple[list[str], int | None] | None] = []
        for index, name in enumerate(names):
            located = self._locate((root / name / "device").resolve())
            address = located[0][-1] if located else None
            devices.append(
                {
                    "id": f"NIC{index}",
                    "kind": "nic",
                    "name": name,
                    "pci_bus_id": address,
                    "numa_node": located[1] if located else None,
                    "link_layer": self._link_layer(root / name / "ports"),
                }
            )
            paths.append(located)
        links: list[dict[str, Any]] = []
        for gpu_id, gpu in gpus:
            for device, nic in zip(devices, paths, strict=True):
                if nic is not None:
                    code = pci_distance(gpu[0], nic[0], gpu[1], nic[1])
                    links.append({"a": gpu_id, "b": device["id"], "type": code})
        for i, first in enumerate(paths):
            for j in range(i + 1, len(paths)):
                second = paths[j]
                if first is not None and second is not None:
                    code = pci_distance(first[0], second[0], first[1], second[1])
                    links.append({"a": devices[i]["id"], "b": devices[j]["id"], "type": code})
        return devices, links

    def _gpu_paths(self) -> list[tuple[str, tuple[list[str], int | None]]]:
        bus_ids = self._gpu_ids() if callable(self._gpu_ids) else self._gpu_ids
        found = []
        problems = set()
        for index, bus_id in enumerate(bus_ids):
            address = sysfs_bus_id(bus_id) if bus_id else None
            if address is None:
                continue
            device = self.sysfs / "bus" / "pci" / "devices" / address
            located = self._locate(device.resolve()) if device.exists() else None
            if located is None:
                problems.add(f"GPU{index} {bus_id}: not found under {device.parent}")
                continue
            found.append((f"GPU{index}", located))
        # Each problem is reported once, not at every reading, until it clears.
        for message in sorted(problems - self._problems):
            self._errors.append({"source": self.name, "message": message})
        self._problems = problems
        return found

    def _locate(self, resolved: Path) -> tuple[list[str], int | None] | None:
        """The device's path components below ``<sysfs>/devices`` and its NUMA node."""
        try:
            parts = list(resolved.relative_to((self.sysfs / "devices").resolve()).parts)
        except ValueError:
            return None  # a software RDMA device (rxe, siw) has no PCI parent
        if not parts or not parts[0].startswith("pci"):
            return None
        numa = _read(self.sysfs / "bus" / "pci" / "devices" / parts[-1] / "numa_node")
        if numa is None:
            numa = _read(resolved / "numa_node")
        node = ascii_int(numa, signed=True)
        return parts, node if node is not None and node >= 0 else None

    def _link_layer(self, ports: Path) -> str | None:
        try:
            numbers = sorted((p.name for p in ports.iterdir()), key=_natural)
        except OSError:
            return None
        layers = [layer for n in numbers if (layer := _read(ports / n / "link_layer"))]
        distinct = list(dict.fromkeys(layers))
        return ",".join(distinct) if distinct else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
