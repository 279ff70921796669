"""The GPU metrics Fleetwatch stores: name, unit, source and plausible range.

This table is the single source of truth for the ingest schema, the sanitiser, the read API and
the charts. A value outside ``[low, high]`` is a driver sentinel or garbage (NVML's
``0xFFFFFFFF``, DCGM's int64 blank ``9223372036854775794``, a negative power) and is stored as
``NULL``. Adding a metric means a row here and an Alembic migration adding the column.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.metrics.plausible import Bound, plausible


@dataclass(frozen=True)
class Metric:
    """One stored GPU metric.

    Attributes:
        name: column and payload field name, unit suffixed (``_pct``, ``_bytes``, ``_w`` …).
        label: short human title for tables and charts.
        unit: display unit.
        source: the NVML call (or field) the agent reads it from.
        low, high: the plausible closed range; outside it the value is nulled.
        integer: True when a fractional value is itself implausible (counts, bitmasks, P-states).
    """

    name: str
    label: str
    unit: str
    source: str
    low: float
    high: float
    integer: bool = False

    @property
    def bound(self) -> Bound:
        """The plausible range as a :class:`~app.metrics.plausible.Bound`."""
        return Bound(self.low, self.high, self.integer)


METRICS: tuple[Metric, ...] = (
    Metric("util_gpu_pct", "GPU utilization", "%", "nvmlDeviceGetUtilizationRates.gpu", 0, 100),
    Metric(
        "util_mem_pct", "Memory utilization", "%", "nvmlDeviceGetUtilizationRates.memory", 0, 100
    ),
    Metric("util_enc_pct", "Encoder utilization", "%", "nvmlDeviceGetEncoderUtilization", 0, 100),
    Metric("util_dec_pct", "Decoder utilization", "%", "nvmlDeviceGetDecoderUtilization", 0, 100),
    Metric("mem_used_bytes", "Memory used", "B", "nvmlDeviceGetMemoryInfo_v2.used", 0, 2**50),
    Metric("mem_free_bytes", "Memory free", "B", "nvmlDeviceGetMemoryInfo_v2.free", 0, 2**50),
    Metric(
        "mem_reserved_bytes",
        "Memory reserved",
        "B",
        "nvmlDeviceGetMemoryInfo_v2.reserved",
        0,
        2**50,
    ),
    Metric("power_w", "Power draw", "W", "nvmlDeviceGetPowerUsage / 1000", 0, 5000),
    Metric("power_limit_w", "Power limit", "W", "nvmlDeviceGetEnforcedPowerLimit / 1000", 0, 5000),
    Metric("energy_j", "Energy", "J", "nvmlDeviceGetTotalEnergyConsumption / 1000", 0, 1e15),
    Metric("temp_c", "GPU temperature", "°C", "nvmlDeviceGetTemperature(GPU)", -40, 200),
    Metric("mem_temp_c", "Memory temperature", "°C", "NVML_FI_DEV_MEMORY_TEMP", -40, 200),
    Metric("sm_clock_mhz", "SM clock", "MHz", "nvmlDeviceGetClockInfo(SM)", 0, 20000),
    Metric("mem_clock_mhz", "Memory clock", "MHz", "nvmlDeviceGetClockInfo(MEM)", 0, 20000),
    Metric(
        "graphics_clock_mhz", "Graphics clock", "MHz", "nvmlDeviceGetClockInfo(GRAPHICS)", 0, 20000
    ),
    Metric("fan_pct", "Fan speed", "%", "nvmlDeviceGetFanSpeed", 0, 150),
    Metric("pstate", "P-state", "", "nvmlDeviceGetPerformanceState", 0, 15, integer=True),
    Metric(
        "clocks_event_reasons",
        "Clock event reasons",
        "bitmask",
        "nvmlDeviceGetCurrentClocksEventReasons",
        0,
        2**40,
        integer=True,
    ),
    Metric("pcie_tx_bytes_per_s", "PCIe TX", "B/s", "nvmlDeviceGetPcieThroughput(TX)", 0, 1e12),
    Metric("pcie_rx_bytes_per_s", "PCIe RX", "B/s", "nvmlDeviceGetPcieThroughput(RX)", 0, 1e12),
    Metric(
        "nvlink_tx_bytes_per_s", "NVLink TX", "B/s", "NVML_FI_DEV_NVLINK_THROUGHPUT_*_TX", 0, 1e13
    ),
    Metric(
        "nvlink_rx_bytes_per_s", "NVLink RX", "B/s", "NVML_FI_DEV_NVLINK_THROUGHPUT_*_RX", 0, 1e13
    ),
    Metric(
        "ecc_corrected_volatile_count",
        "ECC corrected (volatile)",
        "",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
        0,
        1e9,
        integer=True,
    ),
    Metric(
        "ecc_uncorrected_volatile_count",
        "ECC uncorrected (volatile)",
        "",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
        0,
        1e9,
        integer=True,
    ),
    Metric(
        "ecc_corrected_aggregate_count",
        "ECC corrected (aggregate)",
        "",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)",
        0,
        1e9,
        integer=True,
    ),
    Metric(
        "ecc_uncorrected_aggregate_count",
        "ECC uncorrected (aggregate)",
        "",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)",
        0,
        1e9,
        integer=True,
    ),
    Metric(
        "pcie_replay_count",
        "PCIe replays",
        "",
        "nvmlDeviceGetPcieReplayCounter",
        0,
        1e9,
        integer=True,
    ),
    Metric(
        "pcie_link_gen",
        "PCIe link generation",
        "gen",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        1,
        8,
        integer=True,
    ),
    Metric(
        "pcie_link_gen_max",
        "PCIe link generation (max)",
        "gen",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        1,
        8,
        integer=True,
    ),
    Metric(
        "pcie_link_width",
        "PCIe link width",
        "lanes",
        "nvmlDeviceGetCurrPcieLinkWidth",
        1,
        64,
        integer=True,
    ),
    Metric(
        "pcie_link_width_max",
        "PCIe link width (max)",
        "lanes",
        "nvmlDeviceGetMaxPcieLinkWidth",
        1,
        64,
        integer=True,
    ),
    Metric(
        "retired_pages_sbe_count",
        "Retired pages (single-bit)",
        "pages",
        "nvmlDeviceGetRetiredPages(MULTIPLE_SINGLE_BIT_ECC_ERRORS)",
        0,
        1e6,
        integer=True,
    ),
    Metric(
        "retired_pages_dbe_count",
        "Retired pages (double-bit)",
        "pages",
        "nvmlDeviceGetRetiredPages(DOUBLE_BIT_ECC_ERROR)",
        0,
        1e6,
        integer=True,
    ),
    Metric(
        "retired_pages_pending",
        "Page retirement pending",
        "0/1",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        0,
        1,
        integer=True,
    ),
    Metric(
        "remapped_rows_correctable_count",
        "Remapped rows (correctable)",
        "rows",
        "nvmlDeviceGetRemappedRows.corrRows",
        0,
        1e6,
        integer=True,
    ),
    Metric(
        "remapped_rows_uncorrectable_count",
        "Remapped rows (uncorrectable)",
        "rows",
        "nvmlDeviceGetRemappedRows.uncRows",
        0,
        1e6,
        integer=True,
    ),
    Metric(
        "remapped_rows_pending",
        "Row remapping pending",
        "0/1",
        "nvmlDeviceGetRemappedRows.isPending",
        0,
        1,
        integer=True,
    ),
    Metric(
        "remapped_rows_failure",
        "Row remapping failed",
        "0/1",
        "nvmlDeviceGetRemappedRows.failureOccurred",
        0,
        1,
        integer=True,
    ),
)

METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
METRICS_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def sanitize(name: str, value: float | int | None) -> float | int | None:
    """Return ``value`` if plausible for metric ``name``, else ``None``.

    Implausible: NaN, ±inf, outside the metric's range, or fractional for an integer metric.

    Raises:
        KeyError: ``name`` is not in the catalog.
    """
    if value is None:
        return None
    return plausible(value, _BOUNDS[name])


# Built once: sanitize runs for every metric of every sample.
_BOUNDS: dict[str, Bound] = {m.name: m.bound for m in METRICS}
