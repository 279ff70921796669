"""Reading one GPU through the choke point, all its readings in one pass (nvitop-style).

Units are converted here: mW → W, mJ → J, KB/s → B/s (× 1024), KiB counters → B/s rates. Every
value is checked for plausibility before it leaves (:mod:`agents.nvml.plausible`).
"""

from __future__ import annotations

from typing import Any

from agents.nvml.counters import CounterRate
from agents.nvml.metrics import PLACEHOLDER_PREFIX, mig_profile, normalize_bus_id
from agents.nvml.procinfo import process_entry
from agents.nvml.session import (
    ERROR_NAMES,
    GONE_STATES,
    GpuGone,
    NvmlSession,
    Unavailable,
    struct_text,
)

#: ``nvmlFieldValue_t.scopeId`` asking for the sum over all NVLinks.
ALL_LINKS = 0xFFFFFFFF
#: NVML field ids (nvml.h): memory temperature, NVLink data throughput counters in KiB.
FI_MEMORY_TEMP = 82
FI_NVLINK_DATA_TX = 138
FI_NVLINK_DATA_RX = 139
#: NVLink throughput above this (B/s, the docs' plausible range) is a wrapped counter.
MAX_NVLINK_RATE = 1e13
#: ``nvmlValueType_t`` → the member of the ``nvmlValue_t`` union holding the value.
_VALUE_FIELDS = dict(enumerate(("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")))
_PSTATE_UNKNOWN = 32


class GpuReader:
    """The calls for one device handle, recording why metrics are ``None`` in ``reasons``."""

    def __init__(self, session: NvmlSession, handle: Any, key: str) -> None:
        self.session = session
        self.nvml = session.nvml
        self.handle = handle
        self.key = key
        self.reasons: dict[str, str] = {}

    def get(self, metrics: str | tuple[str, ...], function: str, *args: Any) -> Any:
        """``function(handle, *args)``; ``None`` (reason kept for each of ``metrics``) when
        not available. :class:`GpuGone` and timeouts propagate."""
        try:
            return self.session.call(function, self.handle, *args, gpu=self.key)
        except Unavailable as exc:
            for metric in (metrics,) if isinstance(metrics, str) else metrics:
                self.session.note_unavailable(self.reasons, metric, exc, gpu=self.key)
            return None

    def fields(self, wanted: dict[str, tuple[int, int]]) -> dict[str, Any]:
        """``nvmlDeviceGetFieldValues`` for ``metric → (field id, scope id)``; each field's own
        return code decides whether its metric is available."""
        values = self.get(
            tuple(wanted), "nvmlDeviceGetFieldValues", [tuple(v) for v in wanted.values()]
        )
        if values is None:
            return {}
        read: dict[str, Any] = {}
        for metric, value in zip(wanted, values, strict=False):
            code = int(value.nvmlReturn)
            if code == 0:
                member = _VALUE_FIELDS.get(int(value.valueType), "ullVal")
                read[metric] = getattr(value.value, member)
                continue
            name = ERROR_NAMES.get(code, f"ERROR_{code}")
            if name in GONE_STATES:
                raise GpuGone(GONE_STATES[name], f"NVML_ERROR_{name} (nvmlDeviceGetFieldValues)")
            exc = Unavailable(f"nvmlDeviceGetFieldValues({wanted[metric][0]})", name)
            self.session.note_unavailable(self.reasons, metric, exc, gpu=self.key)
        return read


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else value * factor


def _milli(value: Any) -> float | None:
    """mW → W, mJ → J (a division, so 35060 mW is exactly the 35.06 nvidia-smi prints)."""
    return None if value is None else value / 1000


def read_identity(reader: GpuReader, index: int) -> dict[str, Any]:
    """The inventory fields: ``nvmlDeviceGetUUID``, ``…GetName``, ``…GetPciInfo().busId``,
    ``…GetMemoryInfo().total``, ``…GetMigMode``."""
    uuid = reader.get("uuid", "nvmlDeviceGetUUID")
    bus_id = struct_text(reader.get("pci_bus_id", "nvmlDeviceGetPciInfo"), "busId")
    memory = reader.get("mem_total_bytes", "nvmlDeviceGetMemoryInfo")
    mig = reader.get("mig_mode", "nvmlDeviceGetMigMode")
    total = reader.session.plausible.memory_size(
        reader.key, "total memory", None if memory is None else memory.total, total=None
    )
    return {
        "uuid": uuid or f"{PLACEHOLDER_PREFIX}index-{index}",
        "index": index,
        "name": reader.get("name", "nvmlDeviceGetName"),
        "pci_bus_id": normalize_bus_id(bus_id) or bus_id,
        "mem_total_bytes": None if total is None else int(total),
        "mig_mode": None if mig is None else ("enabled" if mig[0] == 1 else "disabled"),
    }


def read_metrics(
    reader: GpuReader,
    rates: dict[str, CounterRate],
    at_s: float,
    *,
    mem_total_bytes: int | None = None,
) -> dict[str, Any]:
    """Every sample metric of the GPU (``None`` when not available or implausible, memory
    beyond ``mem_total_bytes`` included); ``rates`` holds the counter state of the NVLink
    throughput between calls."""
    nv, m = reader.nvml, {}
    util = reader.get(("util_gpu_pct", "util_mem_pct"), "nvmlDeviceGetUtilizationRates")
    m["util_gpu_pct"] = None if util is None else util.gpu
    m["util_mem_pct"] = None if util is None else util.memory
    enc = reader.get("util_enc_pct", "nvmlDeviceGetEncoderUtilization")
    dec = reader.get("util_dec_pct", "nvmlDeviceGetDecoderUtilization")
    m["util_enc_pct"] = None if enc is None else enc[0]
    m["util_dec_pct"] = None if dec is None else dec[0]
    m.update(_memory(reader))
    m["power_w"] = _milli(reader.get("power_w", "nvmlDeviceGetPowerUsage"))
    m["power_limit_w"] = _milli(reader.get("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit"))
    m["energy_j"] = _milli(reader.get("energy_j", "nvmlDeviceGetTotalEnergyConsumption"))
    m["temp_c"] = reader.get("temp_c", "nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)
    fields = reader.fields(
        {
            "mem_temp_c": (FI_MEMORY_TEMP, 0),
            "nvlink_tx_bytes_per_s": (FI_NVLINK_DATA_TX, ALL_LINKS),
            "nvlink_rx_bytes_per_s": (FI_NVLINK_DATA_RX, ALL_LINKS),
        }
    )
    m["mem_temp_c"] = fields.get("mem_temp_c")
    for key in ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"):
        rate = rates.setdefault(key, CounterRate(scale=1024, max_rate=MAX_NVLINK_RATE))
        m[key] = rate.update(fields.get(key), at_s)
        if m[key] is None and key in fields:  # first reading, or the counter went back
            reader.reasons[key] = "NO_DATA"
    for key, clock in (
        ("sm_clock_mhz", nv.NVML_CLOCK_SM),
        ("mem_clock_mhz", nv.NVML_CLOCK_MEM),
        ("graphics_clock_mhz", nv.NVML_CLOCK_GRAPHICS),
    ):
        m[key] = reader.get(key, "nvmlDeviceGetClockInfo", clock)
    m["fan_pct"] = reader.get("fan_pct", "nvmlDeviceGetFanSpeed")
    pstate = reader.get("pstate", "nvmlDeviceGetPerformanceState")
    if pstate == _PSTATE_UNKNOWN:
        pstate, reader.reasons["pstate"] = None, "NO_DATA"
    m["pstate"] = pstate
    m["clocks_event_reasons"] = _clocks_event_reasons(reader)
    m["pcie_tx_bytes_per_s"] = _scaled(
        reader.get(
            "pcie_tx_bytes_per_s", "nvmlDeviceGetPcieThroughput", nv.NVML_PCIE_UTIL_TX_BYTES
        ),
        1024,
    )
    m["pcie_rx_bytes_per_s"] = _scaled(
        reader.get(
            "pcie_rx_bytes_per_s", "nvmlDeviceGetPcieThroughput", nv.NVML_PCIE_UTIL_RX_BYTES
        ),
        1024,
    )
    for kind, error_type in (
        ("corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ("uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
    ):
        for counter, counter_type in (
            ("volatile", nv.NVML_VOLATILE_ECC),
            ("aggregate", nv.NVML_AGGREGATE_ECC),
        ):
            key = f"ecc_{kind}_{counter}_count"
            m[key] = reader.get(key, "nvmlDeviceGetTotalEccErrors", error_type, counter_type)
    m["pcie_replay_count"] = reader.get("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter")
    for key, function in (
        ("pcie_link_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
        ("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
        ("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth"),
        ("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    ):
        m[key] = reader.get(key, function)
    m.update(_retired_and_remapped(reader))
    reader.session.plausible.metrics(reader.key, m, reader.reasons, total=mem_total_bytes)
    return m


def _memory(reader: GpuReader) -> dict[str, Any]:
    """``nvmlDeviceGetMemoryInfo`` v2 (with ``reserved``), falling back to v1."""
    keys = ("mem_used_bytes", "mem_free_bytes", "mem_reserved_bytes")
    version = getattr(reader.nvml, "nvmlMemory_v2", None)
    memory = None
    if version is not None:
        memory = reader.get("mem_reserved_bytes", "nvmlDeviceGetMemoryInfo", version)
    if memory is None:
        memory = reader.get(keys[:2], "nvmlDeviceGetMemoryInfo")
    if memory is None:
        return dict.fromkeys(keys)
    reserved = getattr(memory, "reserved", None)
    return {keys[0]: memory.used, keys[1]: memory.free, keys[2]: reserved}


def _clocks_event_reasons(reader: GpuReader) -> Any:
    """``nvmlDeviceGetCurrentClocksEventReasons``, or ``…ClocksThrottleReasons`` (pre-535)."""
    key = "clocks_event_reasons"
    value = reader.get(key, "nvmlDeviceGetCurrentClocksEventReasons")
    if value is None and reader.reasons.get(key) == "FUNCTION_NOT_FOUND":
        value = reader.get(key, "nvmlDeviceGetCurrentClocksThrottleReasons")
        if value is not None:
            reader.reasons.pop(key, None)
    return value


def _retired_and_remapped(reader: GpuReader) -> dict[str, Any]:
    """``nvmlDeviceGetRetiredPages`` (per cause), ``…RetiredPagesPendingStatus``,
    ``…GetRemappedRows``."""
    m: dict[str, Any] = {}
    nv = reader.nvml
    for key, cause in (
        ("retired_pages_sbe_count", nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        ("retired_pages_dbe_count", nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
    ):
        pages = reader.get(key, "nvmlDeviceGetRetiredPages", cause)
        m[key] = None if pages is None else len(pages)
    pending = reader.get("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
    m["retired_pages_pending"] = None if pending is None else int(bool(pending))
    names = (
        "remapped_rows_correctable_count",
        "remapped_rows_uncorrectable_count",
        "remapped_rows_pending",
        "remapped_rows_failure",
    )
    rows = reader.get(names, "nvmlDeviceGetRemappedRows")
    if rows is None:
        m.update(dict.fromkeys(names))
    else:
        corr, unc, pending_rows, failure = rows
        m.update(zip(names, (corr, unc, int(bool(pending_rows)), int(bool(failure))), strict=True))
    return m


def read_mig_instances(
    reader: GpuReader, *, mem_total_bytes: int | None = None
) -> list[dict[str, Any]]:
    """The MIG devices under the GPU (``nvmlDeviceGetMaxMigDeviceCount``,
    ``…GetMigDeviceHandleByIndex``) with their UUID, GPU/compute instance ids, profile (from
    ``nvmlDeviceGetName``) and memory (``nvmlDeviceGetMemoryInfo``; more than the parent's
    ``mem_total_bytes`` is ``None``)."""
    count = reader.get("mig_instances", "nvmlDeviceGetMaxMigDeviceCount") or 0
    instances = []
    for slot in range(count):
        handle = reader.get("mig_instances", "nvmlDeviceGetMigDeviceHandleByIndex", slot)
        if handle is None:
            continue
        mig = GpuReader(reader.session, handle, reader.key)
        memory = mig.get("mem", "nvmlDeviceGetMemoryInfo")
        instance = {
            "uuid": mig.get("uuid", "nvmlDeviceGetUUID"),
            "gpu_instance_id": mig.get("gi", "nvmlDeviceGetGpuInstanceId"),
            "compute_instance_id": mig.get("ci", "nvmlDeviceGetComputeInstanceId"),
            "profile": mig_profile(mig.get("name", "nvmlDeviceGetName")),
            "mem_total_bytes": None if memory is None else memory.total,
            "mem_used_bytes": None if memory is None else memory.used,
        }
        reader.session.plausible.mig_instance(reader.key, instance, total=mem_total_bytes)
        instances.append(instance)
    reader.reasons.pop("mig_instances", None)
    return instances


def read_processes(
    reader: GpuReader, proc_root: str, *, mem_total_bytes: int | None = None
) -> list[dict[str, Any]] | None:
    """Compute processes (``nvmlDeviceGetComputeRunningProcesses``) with a possible PID, named
    from ``proc_root``; memory sizes the GPU (``mem_total_bytes``) cannot hold are ``None``."""
    found = reader.get("processes", "nvmlDeviceGetComputeRunningProcesses")
    if found is None:
        return None
    raw = [{"pid": p.pid, "used_memory_bytes": p.usedGpuMemory} for p in found]
    kept = reader.session.plausible.processes(reader.key, raw, total=mem_total_bytes)
    return [
        process_entry(int(p["pid"]), p["used_memory_bytes"], proc_root=proc_root)
        for p in sorted(kept, key=lambda p: int(p["pid"]))
    ]
