"""The fake NVML's error type, call wrapper and metric/NVLink functions (see
:mod:`tests.agents.gpu.fake_pynvml`)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml as _real

from tests.agents.gpu.fake_devices import GPU_IS_LOST, FakeDevice, Missing, field_value


class NVMLError(Exception):
    """Like pynvml's: ``value`` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _real.NVMLError._errcode_to_string.get(self.value, f"NVML error {self.value}")


def api(method: Callable[..., Any]) -> Callable[..., Any]:
    """Record the call; apply library-wide and per-device faults; turn :class:`Missing` into
    ``NVMLError``."""

    @functools.wraps(method)
    def call(self: Any, *args: Any) -> Any:
        name = method.__name__
        self.calls.append(name)
        if name in self.failures:
            raise NVMLError(self.failures[name])
        device = args[0] if args and isinstance(args[0], FakeDevice) else None
        if device is not None:
            if device.lost:
                raise NVMLError(GPU_IS_LOST)
            if name in device.failures:
                raise NVMLError(device.failures[name])
            if name in device.hang_s:
                time.sleep(device.hang_s[name])
        try:
            return method(self, *args)
        except Missing as exc:
            raise NVMLError(exc.code) from None

    return call


class MetricsApi:
    """The sample readings, in NVML's units, from the capture."""

    @api
    def nvmlDeviceGetUtilizationRates(self, d: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(gpu=d.value("util_gpu_pct"), memory=d.value("util_mem_pct"))

    @api
    def nvmlDeviceGetEncoderUtilization(self, d: FakeDevice) -> list[int]:
        return [d.value("util_enc_pct"), 167000]

    @api
    def nvmlDeviceGetDecoderUtilization(self, d: FakeDevice) -> list[int]:
        return [d.value("util_dec_pct"), 167000]

    @api
    def nvmlDeviceGetPowerUsage(self, d: FakeDevice) -> int:
        return round(d.value("power_w") * 1000)  # mW

    @api
    def nvmlDeviceGetEnforcedPowerLimit(self, d: FakeDevice) -> int:
        return round(d.value("power_limit_w") * 1000)

    @api
    def nvmlDeviceGetTotalEnergyConsumption(self, d: FakeDevice) -> int:
        if d.energy_mj is None:
            raise Missing(3)
        return next(d.energy_mj)  # mJ since the driver loaded

    @api
    def nvmlDeviceGetTemperature(self, d: FakeDevice, sensor: int) -> int:
        return int(d.value("temp_c"))

    @api
    def nvmlDeviceGetFieldValues(self, d: FakeDevice, ids: list[Any]) -> list[SimpleNamespace]:
        pairs = [i if isinstance(i, tuple) else (i, 0) for i in ids]
        return [field_value(field_id, scope, d) for field_id, scope in pairs]

    @api
    def nvmlDeviceGetClockInfo(self, d: FakeDevice, clock: int) -> int:
        key = {0: "graphics_clock_mhz", 1: "sm_clock_mhz", 2: "mem_clock_mhz"}[clock]
        return int(d.value(key))

    @api
    def nvmlDeviceGetFanSpeed(self, d: FakeDevice) -> int:
        return int(d.value("fan_pct"))

    @api
    def nvmlDeviceGetPerformanceState(self, d: FakeDevice) -> int:
        return int(d.value("pstate"))

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(self, d: FakeDevice) -> int:
        return int(d.value("clocks_event_reasons"))

    @api
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, d: FakeDevice) -> int:
        return int(d.value("clocks_event_reasons"))

    @api
    def nvmlDeviceGetPcieThroughput(self, d: FakeDevice, counter: int) -> int:
        key = "pcie_tx_bytes_per_s" if counter == 0 else "pcie_rx_bytes_per_s"
        return int(d.value(key)) // 1024  # KB/s

    @api
    def nvmlDeviceGetTotalEccErrors(self, d: FakeDevice, error: int, counter: int) -> int:
        kind = "corrected" if error == 0 else "uncorrected"
        return int(d.value(f"ecc_{kind}_{'volatile' if counter == 0 else 'aggregate'}_count"))

    @api
    def nvmlDeviceGetPcieReplayCounter(self, d: FakeDevice) -> int:
        return int(d.value("pcie_replay_count"))

    @api
    def nvmlDeviceGetCurrPcieLinkGeneration(self, d: FakeDevice) -> int:
        return int(d.value("pcie_link_gen"))

    @api
    def nvmlDeviceGetMaxPcieLinkGeneration(self, d: FakeDevice) -> int:
        return int(d.value("pcie_link_gen_max"))

    @api
    def nvmlDeviceGetCurrPcieLinkWidth(self, d: FakeDevice) -> int:
        return int(d.value("pcie_link_width"))

    @api
    def nvmlDeviceGetMaxPcieLinkWidth(self, d: FakeDevice) -> int:
        return int(d.value("pcie_link_width_max"))

    @api
    def nvmlDeviceGetRetiredPages(self, d: FakeDevice, cause: int) -> list[int]:
        key = "retired_pages_sbe_count" if cause == 0 else "retired_pages_dbe_count"
        return [0x1000 * (n + 1) for n in range(int(d.value(key)))]

    @api
    def nvmlDeviceGetRetiredPagesPendingStatus(self, d: FakeDevice) -> int:
        return int(d.value("retired_pages_pending"))

    @api
    def nvmlDeviceGetRemappedRows(self, d: FakeDevice) -> tuple[int, int, int, int]:
        return (
            int(d.value("remapped_rows_correctable_count")),
            int(d.value("remapped_rows_uncorrectable_count")),
            int(d.value("remapped_rows_pending")),
            int(d.value("remapped_rows_failure")),
        )


class LinksApi:
    """NVLinks, topology and the Xid event set."""

    pending_xids: list[tuple[FakeDevice, int]]
    topology: dict[tuple[str, str], int]

    @api
    def nvmlDeviceGetNvLinkState(self, d: FakeDevice, link: int) -> int:
        return int(d.link(link).up)

    @api
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, d: FakeDevice, link: int) -> int:
        return d.link(link).remote_type

    @api
    def nvmlDeviceGetNvLinkRemotePciInfo(self, d: FakeDevice, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=d.link(link).remote_bus_id)

    @api
    def nvmlDeviceGetNvLinkErrorCounter(self, d: FakeDevice, link: int, counter: int) -> int:
        return d.link(link).errors[counter]

    @api
    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeDevice, b: FakeDevice) -> int:
        level = self.topology.get((a.uuid, b.uuid), self.topology.get((b.uuid, a.uuid)))
        if level is None:
            raise Missing(3)
        return level

    @api
    def nvmlDeviceGetNumaNodeId(self, d: FakeDevice) -> int:
        if d.numa_node is None:
            raise Missing(13)
        return d.numa_node

    @api
    def nvmlDeviceGetCpuAffinity(self, d: FakeDevice, words: int) -> list[int]:
        mask = [0] * words
        for cpu in d.cpus:
            if cpu < words * 64:
                mask[cpu // 64] |= 1 << (cpu % 64)
        return mask

    @api
    def nvmlEventSetCreate(self) -> object:
        return object()

    @api
    def nvmlDeviceRegisterEvents(self, d: FakeDevice, types: int, event_set: object) -> None:
        return None

    @api
    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        if not self.pending_xids:
            raise Missing(10)  # NVML_ERROR_TIMEOUT: nothing waiting
        device, xid = self.pending_xids.pop(0)
        return SimpleNamespace(device=device, eventType=0x8, eventData=xid)

    @api
    def nvmlEventSetFree(self, event_set: object) -> None:
        return None
