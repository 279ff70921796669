"""Choosing the agent's data sources: the GPU collector (``auto`` tries NVML, then nvidia-smi)
and the host sources (storage, InfiniBand ports and topology, the kernel log)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.collectors import Collector, CollectorUnavailable, create_collector
from agents.collectors.host import HostSource
from agents.collectors.none import NoGpuCollector
from agents.pci_gpus import nvidia_gpu_count

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourcePaths:
    """Where the agent reads the machine from (node_exporter's ``--path.*`` idea), so tests and
    containers can point it at a prepared tree."""

    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    rootfs: Path = Path("/")
    kmsg: Path | None = None  # a file to follow instead of /dev/kmsg
    nvidia_smi: str = "nvidia-smi"


def choose_collector(kind: str, paths: SourcePaths) -> tuple[Collector, str]:
    """The GPU collector for ``kind`` (``auto``, ``nvml``, ``nvidia-smi``) and a sentence
    saying which one runs and why.

    ``auto`` takes NVML, else nvidia-smi, else :class:`NoGpuCollector` (no GPUs reported).
    nvidia-smi, once found, is kept even when its first run shows no GPU (a driver that does
    not answer, "No devices were found") if it was asked for or NVIDIA GPUs are on PCI: it
    then says why each round and reports the GPUs once the driver answers again.
    The GPU collectors read process names and owners under ``paths.procfs`` and GPU NUMA nodes
    under ``paths.sysfs`` (an agent in a container sees the host's PIDs through NVML, so its
    own ``/proc`` would name other processes).

    Raises:
        CollectorUnavailable: an explicitly requested collector cannot run here.
    """
    nvml = {"proc_root": str(paths.procfs), "sys_root": str(paths.sysfs)}
    smi: dict[str, Any] = {"nvidia_smi": paths.nvidia_smi, "proc_root": str(paths.procfs)}
    if kind == "nvml":
        return create_collector("nvml", **nvml), "collector nvml (asked for)"
    if kind == "nvidia-smi":
        collector = create_collector("nvidia-smi", **smi, wait_for_driver=True)
        return collector, f"collector nvidia-smi ({paths.nvidia_smi}, asked for)"
    reasons = []
    try:
        return create_collector("nvml", **nvml), "collector nvml (NVML loaded)"
    except CollectorUnavailable as exc:
        reasons.append(f"nvml: {exc}")
    try:
        on_pci = bool(nvidia_gpu_count(paths.sysfs))
        collector = create_collector("nvidia-smi", **smi, wait_for_driver=on_pci)
        return collector, f"collector nvidia-smi, because {reasons[0]}"
    except (CollectorUnavailable, KeyError) as exc:
        reasons.append(f"nvidia-smi: {exc}")
    reason = "no NVIDIA driver found (" + "; ".join(reasons) + ")"
    return NoGpuCollector(reason), reason + ": reporting storage, network and kernel events only"


def mount_table_pid(paths: SourcePaths) -> str:
    """Whose mount table (``<procfs>/<pid>/mountinfo`` and ``mountstats``) the agent reads:
    its own (``self``) when it measures ``/``; PID 1's, the host's init, when ``--rootfs`` names
    another root (an agent in a container with the host's ``/`` and ``/proc`` mounted reads the
    host's mounts, not its container's, as node_exporter does with ``--path.rootfs``)."""
    return "self" if paths.rootfs == Path("/") else "1"


def host_sources(collector: Collector, paths: SourcePaths) -> list[HostSource]:
    """Storage (diskstats, mounts, NFS), InfiniBand ports and NIC topology, and the kernel log.

    The NIC topology asks the collector for the GPUs' PCI bus ids at each reading.
    """
    from agents.host import storage_and_network_sources
    from agents.kernel.kmsg import KmsgSource
    from agents.topology.nics import InfinibandTopology

    def gpu_bus_ids() -> list[str | None]:
        try:
            return [g.get("pci_bus_id") for g in collector.inventory()]
        except Exception:  # the collector reports its own failures
            return []

    sources: list[HostSource] = list(
        storage_and_network_sources(
            paths.procfs, paths.sysfs, paths.rootfs, pid=mount_table_pid(paths)
        )
    )
    sources.append(InfinibandTopology(paths.sysfs, gpu_bus_ids))
    sources.append(KmsgSource(paths.kmsg, procfs=paths.procfs))
    return sources
