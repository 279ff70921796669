"""The GPU part of the ``topology`` section from NVML: each GPU's NUMA node, CPU affinity and
PCIe link, and the nvidia-smi code between each pair of GPUs.

A pair's code is ``nvmlDeviceGetTopologyCommonAncestor`` mapped to nvidia-smi's words, unless
NVLinks join them: then ``NV#`` with ``#`` the active links between the two, or, on NVSwitch
systems (every link goes to a switch), the active link count both GPUs have to the fabric.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.nvml.device import GpuReader
from agents.nvml.links import LinkReading, nvlink_counts
from agents.nvml.metrics import cpu_ranges
from agents.nvml.session import GpuGone, Unavailable
from agents.nvml.worker import CallTimedOut

#: ``nvmlGpuTopologyLevel_t`` → nvidia-smi ``topo -m`` code.
TOPOLOGY_CODES = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_MIN_CPU_WORDS = 16  # 1024 CPUs: NVML only fills the words it is given


@dataclass
class TopologyGpu:
    """One readable GPU: its reader, inventory fields and NVLink readings."""

    reader: GpuReader
    index: int
    uuid: str
    pci_bus_id: str | None
    links: list[LinkReading] = field(default_factory=list)


def gpu_device(gpu: TopologyGpu, *, sys_root: str = "/sys") -> dict[str, Any]:
    """A ``devices`` entry of kind ``gpu``: ``numa_node`` (``nvmlDeviceGetNumaNodeId``, else
    sysfs ``numa_node``), ``cpu_affinity`` (``nvmlDeviceGetCpuAffinity`` as ``0-51,104-155``)
    and the PCIe generation and width, current and max."""
    r = gpu.reader
    numa = r.get("numa_node", "nvmlDeviceGetNumaNodeId")
    if numa is None or numa < 0:
        numa = sysfs_numa_node(gpu.pci_bus_id, sys_root=sys_root)
    words = max(_MIN_CPU_WORDS, math.ceil((os.cpu_count() or 1) / 64))
    mask = r.get("cpu_affinity", "nvmlDeviceGetCpuAffinity", words)
    cpus = [] if mask is None else mask_cpus(list(mask))
    return {
        "id": f"GPU{gpu.index}",
        "kind": "gpu",
        "gpu_uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "numa_node": numa,
        "cpu_affinity": cpu_ranges(cpus),
        "pcie_gen_current": r.get("pcie", "nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_gen_max": r.get("pcie", "nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_width_current": r.get("pcie", "nvmlDeviceGetCurrPcieLinkWidth"),
        "pcie_width_max": r.get("pcie", "nvmlDeviceGetMaxPcieLinkWidth"),
    }


def pair_code(a: TopologyGpu, b: TopologyGpu) -> str | None:
    """The nvidia-smi code between two GPUs (``NV#``, ``PIX`` … ``SYS``); ``None`` when NVML
    cannot tell (the reason stays in ``a.reader.reasons``)."""
    links = nvlink_count(a, b)
    if links:
        return f"NV{links}"
    try:
        level = a.reader.session.call(
            "nvmlDeviceGetTopologyCommonAncestor", a.reader.handle, b.reader.handle, gpu=a.uuid
        )
    except Unavailable as exc:
        a.reader.session.note_unavailable(a.reader.reasons, "topology", exc, gpu=a.uuid)
        return None
    return TOPOLOGY_CODES.get(int(level), "SYS")


def gpu_links(gpus: list[TopologyGpu], errors: list[str]) -> list[dict[str, str]]:
    """The ``links`` between every pair of ``gpus``, ``a`` before ``b``, never ``X``; a pair
    NVML cannot place is left out and named in ``errors``."""
    links = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            pair = f"GPU{a.index}-GPU{b.index}"
            try:
                code = pair_code(a, b)
            except (GpuGone, CallTimedOut) as exc:
                errors.append(f"{pair}: {exc}")
                continue
            if code is None:
                errors.append(f"{pair}: nvmlDeviceGetTopologyCommonAncestor not available")
            elif code != "X":
                links.append({"a": f"GPU{a.index}", "b": f"GPU{b.index}", "type": code})
    return links


def nvlink_count(a: TopologyGpu, b: TopologyGpu) -> int:
    """Active NVLinks joining ``a`` and ``b`` directly, else the links both have to NVSwitches."""
    a_peers, a_switch = nvlink_counts(a.links)
    b_peers, b_switch = nvlink_counts(b.links)
    direct = max(
        a_peers.get(b.pci_bus_id or "", 0),
        b_peers.get(a.pci_bus_id or "", 0),
    )
    if direct:
        return direct
    return min(a_switch, b_switch)


def mask_cpus(words: list[int]) -> list[int]:
    """The CPU numbers set in an ``nvmlDeviceGetCpuAffinity`` mask (64-bit words, CPU 0 in
    bit 0 of word 0)."""
    return [
        index * 64 + bit
        for index, word in enumerate(words)
        for bit in range(64)
        if int(word) >> bit & 1
    ]


def sysfs_numa_node(bus_id: str | None, *, sys_root: str = "/sys") -> int | None:
    """``/sys/bus/pci/devices/<bus id>/numa_node``; ``None`` when absent or ``-1``."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.partition(":")
    sysfs_id = f"{int(domain, 16):04x}:{rest.lower()}" if rest else bus_id.lower()
    try:
        text = (Path(sys_root) / "bus/pci/devices" / sysfs_id / "numa_node").read_text()
        value = int(text.strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None
