"""The GPUs NVML enumerates, and what the collector remembers of each between rounds.

GPUs are keyed by UUID, not by index: when a GPU drops out, NVML renumbers the rest, and a GPU
that comes back after a reset is the same GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from agents.nvml.counters import CounterRate
from agents.nvml.device import GpuReader, read_identity
from agents.nvml.metrics import inventory_entry
from agents.nvml.session import GpuGone, NvmlSession, Unavailable
from agents.nvml.worker import CallTimedOut
from agents.payload import GpuInfo


@dataclass
class NvmlGpu:
    """One GPU: identity (``uuid``, ``index``, ``name``, ``pci_bus_id``, ``mem_total_bytes``,
    ``mig_mode``), handle, state, and the last inventory readings."""

    info: dict[str, Any]
    handle: Any
    state: str = "ok"
    state_reason: str | None = None
    missing: bool = False
    unavailable: dict[str, str] | None = None
    mig_instances: list[dict[str, Any]] | None = None
    processes: list[dict[str, Any]] | None = None
    rates: dict[str, CounterRate] = field(default_factory=dict)

    @property
    def uuid(self) -> str:
        """``nvmlDeviceGetUUID`` (made distinct when a UUID repeats)."""
        return str(self.info["uuid"])

    def label(self) -> str:
        """``GPU 3 (GPU-…, 00000000:1B:00.0)`` for messages."""
        return f"GPU {self.info['index']} ({self.uuid}, {self.info.get('pci_bus_id')})"

    def entry(self) -> GpuInfo:
        """The inventory entry; a GPU not ``ok`` carries no readings, only its state."""
        info = cast(GpuInfo, dict(self.info, state=self.state, state_reason=self.state_reason))
        if self.state != "ok":
            return inventory_entry(info)
        return inventory_entry(
            info,
            unavailable=self.unavailable,
            mig_instances=self.mig_instances,
            processes=self.processes,
        )


@dataclass
class Enumeration:
    """What one enumeration found: GPUs seen (new or back), GPUs gone missing, errors."""

    seen: list[NvmlGpu] = field(default_factory=list)
    missing: list[NvmlGpu] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def distinct_uuid(uuid: str, bus_id: str | None, taken: set[str]) -> str:
    """``uuid``, or ``uuid@bus_id`` when another GPU of this enumeration already has it (cloned
    VM images and masked captures repeat UUIDs; two GPUs must never merge into one)."""
    if uuid not in taken:
        return uuid
    return f"{uuid}@{bus_id or len(taken)}"


def enumerate_gpus(session: NvmlSession, count: int, known: dict[str, NvmlGpu]) -> Enumeration:
    """Read the identity of GPUs ``0 .. count-1`` (``nvmlDeviceGetHandleByIndex``) into
    ``known``; GPUs of ``known`` not found are marked missing and ``lost``."""
    found = Enumeration()
    for index in range(count):
        try:
            handle = session.call("nvmlDeviceGetHandleByIndex", index)
            info = read_identity(GpuReader(session, handle, f"index:{index}"), index)
        except (Unavailable, GpuGone, CallTimedOut) as exc:
            found.errors.append(f"GPU {index}: cannot be enumerated: {exc}")
            continue
        uuid = distinct_uuid(info["uuid"], info["pci_bus_id"], {g.uuid for g in found.seen})
        if uuid != info["uuid"]:
            found.errors.append(f"GPU {index} repeats UUID {info['uuid']}; reported as {uuid}")
            info["uuid"] = uuid
        gpu = known.get(uuid)
        if gpu is None:
            gpu = known[uuid] = NvmlGpu(info, handle)
        else:
            gpu.info, gpu.handle, gpu.missing = info, handle, False
            gpu.rates.clear()
        found.seen.append(gpu)
    seen = {g.uuid for g in found.seen}
    for gpu in known.values():
        if gpu.uuid not in seen and not gpu.missing:
            gpu.missing, gpu.state = True, "lost"
            gpu.state_reason = f"not enumerated by NVML any more ({count} GPUs visible)"
            found.missing.append(gpu)
    return found
