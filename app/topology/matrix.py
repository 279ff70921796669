"""The ``nvidia-smi topo -m`` table built from a stored topology document (a pure function).

Rows and columns are the devices, GPUs first then NICs, each in index order; a cell is the link
type between two devices (``X`` on the diagonal, empty when the document has no link). GPU rows
end with their CPU and NUMA affinity; NICs are named in a legend below, as nvidia-smi does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from app.series.writes import natural_key

#: nvidia-smi's legend, in its order; ``NV#`` stands for every NVLink count.
LEGEND: tuple[tuple[str, str], ...] = (
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
        "(e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
        "within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
_KIND_ORDER = {"gpu": 0, "nic": 1}
_NVLINK = re.compile(r"^NV(\d+)$")


@dataclass(frozen=True)
class MatrixRow:
    """One device's row: its cells (aligned with the matrix columns) and, for GPUs, affinity."""

    device: dict[str, Any]
    cells: tuple[str, ...]
    cpu_affinity: str | None
    numa_node: int | None


@dataclass(frozen=True)
class TopologyMatrix:
    """The table: column ids, rows, the NIC legend (``NIC0`` → ``mlx5_0``), and the NVLink
    counts (``NV18`` …) seen, for the legend and for spotting a pair with fewer links."""

    columns: tuple[str, ...]
    rows: tuple[MatrixRow, ...]
    nic_names: tuple[tuple[str, str], ...]
    nvlink_counts: tuple[int, ...]

    @property
    def max_nvlinks(self) -> int | None:
        """The largest NVLink count between two devices (the healthy value on NVSwitch
        systems), or None without NVLink."""
        return max(self.nvlink_counts) if self.nvlink_counts else None


def nvlink_count(link_type: str) -> int | None:
    """``"NV18"`` → 18; any other code → None."""
    match = _NVLINK.match(link_type)
    return int(match.group(1)) if match else None


def build_matrix(document: dict[str, Any]) -> TopologyMatrix:
    """The matrix of a stored topology document (``devices`` and ``links`` as in
    docs/ingest.md); links naming unknown devices are ignored."""
    devices = sorted(
        document.get("devices", []),
        key=lambda d: (_KIND_ORDER.get(d.get("kind", ""), 2), natural_key(str(d.get("id", "")))),
    )
    ids = [str(d["id"]) for d in devices]
    known = set(ids)
    pairs: dict[tuple[str, str], str] = {}
    counts: set[int] = set()
    for link in document.get("links", []):
        a, b, kind = link.get("a"), link.get("b"), link.get("type", "")
        if a in known and b in known and a != b:
            pairs[(a, b)] = pairs[(b, a)] = kind
            count = nvlink_count(kind)
            if count is not None:
                counts.add(count)
    rows = []
    for device in devices:
        own = str(device["id"])
        is_gpu = device.get("kind") == "gpu"
        rows.append(
            MatrixRow(
                device=device,
                cells=tuple("X" if other == own else pairs.get((own, other), "") for other in ids),
                cpu_affinity=device.get("cpu_affinity") if is_gpu else None,
                numa_node=device.get("numa_node") if is_gpu else None,
            )
        )
    nics = tuple(
        (str(d["id"]), str(d.get("name") or d.get("pci_bus_id") or "?"))
        for d in devices
        if d.get("kind") == "nic"
    )
    return TopologyMatrix(
        columns=tuple(ids),
        rows=tuple(rows),
        nic_names=nics,
        nvlink_counts=tuple(sorted(counts)),
    )
