"""The devices of the fake NVML, built from real ``nvidia-smi -q -x`` captures: the values NVML
would have returned on that machine, in NVML's units (mW, KB/s, bytes), and the error code it
would have raised where nvidia-smi printed N/A."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from agents.nvidia_smi import SmiGpu

NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND = 3, 4, 6, 13
GPU_IS_LOST, UNKNOWN, DEPRECATED = 15, 999, 26
#: The parser's reason → the NVML code a real driver returns for that field.
REASON_CODES = {
    "NOT_SUPPORTED": NOT_SUPPORTED,
    "NOT_REPORTED": NOT_SUPPORTED,
    "NO_PERMISSION": NO_PERMISSION,
    "UNKNOWN": UNKNOWN,
    "DEPRECATED": DEPRECATED,
}


class Missing(Exception):
    """The device has no value: NVML answers ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class FakeLink:
    """One NVLink: ``up``, the peer (``remote_type``: 0 GPU, 2 NVSwitch) and its counters."""

    up: bool = True
    remote_type: int = 2
    remote_bus_id: str = "00000000:C7:00.0"
    speed_mbps: int = 26562
    tx_kib: int = 0
    rx_kib: int = 0
    errors: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, 2: 0})


@dataclass
class FakeDevice:
    """One GPU (or MIG device) of the fake. ``metrics``/``reasons`` are the capture's readings;
    the other attributes are the faults and extras a test sets."""

    uuid: str
    name: str | bytes | None
    bus_id: str | None
    mem_total: int | None
    metrics: dict[str, Any]
    reasons: dict[str, str]
    mig_mode: str | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)
    mig_devices: list[FakeDevice] = field(default_factory=list)
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None
    lost: bool = False
    failures: dict[str, int] = field(default_factory=dict)
    hang_s: dict[str, float] = field(default_factory=dict)
    energy_mj: Iterator[int] | None = None
    nvlinks: list[FakeLink] | None = None
    numa_node: int | None = None
    cpus: list[int] = field(default_factory=list)

    @classmethod
    def from_capture(cls, gpu: SmiGpu) -> FakeDevice:
        """The device a capture's ``<gpu>`` describes (MIG instances become child devices)."""
        device = cls(
            uuid=gpu.info["uuid"],
            name=gpu.info["name"],
            bus_id=gpu.info["pci_bus_id"],
            mem_total=gpu.info["mem_total_bytes"],
            metrics=dict(gpu.metrics),
            reasons=dict(gpu.unavailable),
            mig_mode=gpu.info["mig_mode"],
            processes=[p for p in gpu.processes if "C" in (p["type"] or "")],
        )
        for n, mig in enumerate(gpu.mig_instances or []):
            child = cls(
                uuid=f"MIG-00000000-0000-0000-0000-{n + 1:012d}",
                name=gpu.info["name"],
                bus_id=device.bus_id,
                mem_total=mig["mem_total_bytes"],
                metrics={"mem_used_bytes": mig["mem_used_bytes"], "mem_free_bytes": None},
                reasons={},
                gpu_instance_id=mig["gpu_instance_id"],
                compute_instance_id=mig["compute_instance_id"],
            )
            device.mig_devices.append(child)
        return device

    def value(self, metric: str) -> Any:
        """The capture's value of ``metric``, or :class:`Missing` with NVML's code."""
        value = self.metrics.get(metric)
        if value is None:
            raise Missing(REASON_CODES.get(self.reasons.get(metric, ""), NOT_SUPPORTED))
        return value

    def memory(self, v2: bool) -> SimpleNamespace:
        """``nvmlMemory_t`` (v1) or ``nvmlMemory_v2_t``: bytes, as NVML counts them."""
        if self.mem_total is None:
            raise Missing(NOT_SUPPORTED)
        used = self.value("mem_used_bytes")
        free = self.metrics.get("mem_free_bytes") or 0
        if not v2:
            return SimpleNamespace(total=self.mem_total, free=free, used=used)
        if self.metrics.get("mem_reserved_bytes") is None:
            raise Missing(FUNCTION_NOT_FOUND)  # drivers before nvmlDeviceGetMemoryInfo_v2
        reserved = self.metrics["mem_reserved_bytes"]
        return SimpleNamespace(total=self.mem_total, reserved=reserved, free=free, used=used)

    def link(self, link: int) -> FakeLink:
        if self.nvlinks is None:
            raise Missing(NOT_SUPPORTED)
        if not 0 <= link < len(self.nvlinks):
            raise Missing(2)  # INVALID_ARGUMENT, as past a GPU's last link
        return self.nvlinks[link]


def field_value(field_id: int, scope: int, device: FakeDevice) -> SimpleNamespace:
    """One ``nvmlFieldValue_t`` as pynvml returns it (``nvmlReturn``, ``valueType``,
    ``value.<type>``)."""
    try:
        if field_id == 82:
            number, kind = device.value("mem_temp_c"), 1
        elif field_id in (138, 139):
            links = [device.link(scope)] if scope != 0xFFFFFFFF else (device.nvlinks or [])
            if device.nvlinks is None:
                raise Missing(NOT_SUPPORTED)
            number = sum(lk.tx_kib if field_id == 138 else lk.rx_kib for lk in links)
            kind = 3
        elif field_id == 164:
            number, kind = device.link(scope).speed_mbps, 1
        else:
            raise Missing(NOT_SUPPORTED)
    except Missing as exc:
        return SimpleNamespace(nvmlReturn=exc.code, valueType=1, value=SimpleNamespace(uiVal=0))
    value = SimpleNamespace(uiVal=number, ullVal=number, dVal=float(number))
    return SimpleNamespace(nvmlReturn=0, valueType=kind, value=value)
