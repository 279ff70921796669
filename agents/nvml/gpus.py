"""The GPUs NVML enumerates, and what the collector remembers of each between rounds.

GPUs are keyed by UUID, not by index: when a GPU drops out, NVML renumbers the rest, and a GPU
that comes back after a reset is the same GPU.

A GPU the driver counts but cannot open (``nvmlDeviceGetHandleByIndex`` fails with
``GPU_IS_LOST`` or ``UNKNOWN``; nvidia-smi's "Unable to determine the device handle") has no
UUID to be reported under: it is reported as an *unreadable* GPU, ``GPU-unknown-<PCI address>``
(``GPU-unknown-index-<n>`` when the address cannot be told), in state ``lost`` or
``unknown_error`` with the reason, until it can be opened again and is reported under its UUID
(the server then takes the placeholder's row over by PCI address).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from agents.nvml.counters import CounterRate
from agents.nvml.device import GpuReader, read_identity
from agents.nvml.metrics import PLACEHOLDER_PREFIX, inventory_entry, normalize_bus_id
from agents.nvml.session import GpuGone, NvmlSession, Unavailable
from agents.nvml.worker import CallTimedOut
from agents.payload import GpuInfo
from agents.pci_gpus import nvidia_gpu_addresses


@dataclass
class NvmlGpu:
    """One GPU: identity (``uuid``, ``index``, ``name``, ``pci_bus_id``, ``mem_total_bytes``,
    ``mig_mode``), handle, state, and the last inventory readings. ``placeholder``: a GPU the
    driver cannot open (see the module docstring); it has no handle and no readings."""

    info: dict[str, Any]
    handle: Any
    state: str = "ok"
    state_reason: str | None = None
    missing: bool = False
    unavailable: dict[str, str] | None = None
    mig_instances: list[dict[str, Any]] | None = None
    processes: list[dict[str, Any]] | None = None
    rates: dict[str, CounterRate] = field(default_factory=dict)
    placeholder: bool = False

    @property
    def uuid(self) -> str:
        """``nvmlDeviceGetUUID`` (made distinct when a UUID repeats)."""
        return str(self.info["uuid"])

    def label(self) -> str:
        """``GPU 3 (GPU-…, 00000000:1B:00.0)`` for messages."""
        bus_id = self.info.get("pci_bus_id") or "PCI address unknown"
        return f"GPU {self.info['index']} ({self.uuid}, {bus_id})"

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


def unreadable_gpu(index: int, bus_id: str | None) -> NvmlGpu:
    """The placeholder of a GPU that cannot be opened, at NVML index ``index`` and PCI address
    ``bus_id`` (NVML spelling, or ``None`` when unknown); its state is set by the caller."""
    name = bus_id if bus_id else f"index-{index}"
    info = {
        "uuid": f"{PLACEHOLDER_PREFIX}{name}",
        "index": index,
        "name": None,
        "pci_bus_id": bus_id,
        "mem_total_bytes": None,
        "mig_mode": None,
    }
    return NvmlGpu(info, None, placeholder=True)


@dataclass
class Enumeration:
    """What one enumeration found: GPUs seen (new or back), GPUs gone missing, GPUs that cannot
    be opened with why (``gone``: placeholders, or known GPUs that lost their handle), errors."""

    seen: list[NvmlGpu] = field(default_factory=list)
    missing: list[NvmlGpu] = field(default_factory=list)
    gone: list[tuple[NvmlGpu, GpuGone]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def distinct_uuid(uuid: str, bus_id: str | None, taken: set[str]) -> str:
    """``uuid``, or ``uuid@bus_id`` when another GPU of this enumeration already has it (cloned
    VM images and masked captures repeat UUIDs; two GPUs must never merge into one)."""
    if uuid not in taken:
        return uuid
    return f"{uuid}@{bus_id or len(taken)}"


def enumerate_gpus(
    session: NvmlSession, count: int, known: dict[str, NvmlGpu], *, sys_root: str = "/sys"
) -> Enumeration:
    """Read the identity of GPUs ``0 .. count-1`` (``nvmlDeviceGetHandleByIndex``) into
    ``known``. A GPU that cannot be opened because it is lost or in an unknown error state is
    in ``gone``: a placeholder (:func:`unreadable_gpu`, its PCI address from ``sys_root``), or
    the known GPU at that address. Placeholders not found again leave ``known``; other GPUs of
    ``known`` not found are marked missing and ``lost``."""
    found = Enumeration()
    failed: list[tuple[int, GpuGone]] = []
    for index in range(count):
        try:
            handle = session.call("nvmlDeviceGetHandleByIndex", index)
            info = read_identity(GpuReader(session, handle, f"index:{index}"), index)
        except GpuGone as exc:
            failed.append((index, exc))
            continue
        except (Unavailable, CallTimedOut) as exc:
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
    _add_unreadable(found, failed, known, sys_root)
    seen = {g.uuid for g in found.seen} | {g.uuid for g, _ in found.gone}
    for gpu in list(known.values()):
        if gpu.uuid in seen:
            continue
        if gpu.placeholder:  # opened again (under its UUID now) or no longer counted
            del known[gpu.uuid]
        elif not gpu.missing:
            gpu.missing, gpu.state = True, "lost"
            gpu.state_reason = f"not enumerated by NVML any more ({count} GPUs visible)"
            found.missing.append(gpu)
    return found


def _add_unreadable(
    found: Enumeration, failed: list[tuple[int, GpuGone]], known: dict[str, NvmlGpu], sys_root: str
) -> None:
    """Put each GPU of ``failed`` into ``found.gone``: the known GPU at its PCI address, or a
    placeholder. NVML cannot give the address of a device it cannot open; the NVIDIA GPUs on
    PCI (sysfs) that no opened GPU holds are the candidates, paired with the failed indexes in
    order (NVML enumerates in PCI order) when there are as many of each, else unknown."""
    if not failed:
        return
    addresses = nvidia_gpu_addresses(Path(sys_root)) or []
    opened = {g.info.get("pci_bus_id") for g in found.seen}
    free = [a for a in map(normalize_bus_id, addresses) if a is not None and a not in opened]
    buses: list[str | None] = list(free) if len(free) == len(failed) else [None] * len(failed)
    by_bus = {g.info.get("pci_bus_id"): g for g in known.values() if not g.placeholder}
    for (index, exc), bus_id in zip(failed, buses, strict=True):
        gpu = by_bus.get(bus_id) if bus_id else None
        if gpu is None:
            gpu = unreadable_gpu(index, bus_id)
            gpu = known.setdefault(gpu.uuid, gpu)
            gpu.info["index"] = index
        else:
            gpu.missing = False
        found.gone.append((gpu, exc))
