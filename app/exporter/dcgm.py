"""Which stored GPU values ``/metrics`` serves under which dcgm-exporter metric, with its type
and unit.

Names are DCGM's field identifiers as dcgm-exporter exports them (its ``default-counters.csv``
and ``dcp-metrics-included.csv``; DCGM's "Field Identifiers" reference for the fields those
files leave commented out); the type is the one dcgm-exporter's files give (``counter`` for
the PCIe throughput too, which is NVML's rate in KB/s: dcgm-exporter types it so), else
DCGM's (a cumulative count is a counter, a reading a gauge). Units are DCGM's: framebuffer in
MiB, energy in mJ, power in W, clocks in MHz, temperatures in °C, PCIe throughput in KB/s
(NVML's ``nvmlDeviceGetPcieThroughput`` unit), NVLink data rate in B/s. Integer fields are
served as integers, as dcgm-exporter prints them.

``source`` names the value's key in the scrape's row of a GPU: a metric of
:mod:`app.metrics.catalog` (its newest sample), ``mem_total_bytes`` (the inventory) or
``last_xid`` (the newest stored Xid event; 0 for none). A ``None`` value is left out, never
served as 0. :data:`NOT_SERVED` lists what dcgm-exporter serves and Fleetwatch does not, and
why (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

MiB = 2**20


def whole(value: float) -> int:
    """An integer field stored as a number (a temperature kept as a double)."""
    return round(value)


def mib(value: float) -> int:
    """Bytes → whole MiB, truncated as DCGM does."""
    return int(value) // MiB


def kib(value: float) -> int:
    """Bytes per second → NVML's KB/s (1,024 bytes), truncated."""
    return int(value) // 1024


def milli(value: float) -> int:
    """Joules → millijoules, NVML's unit for the energy counter."""
    return round(value * 1000)


def real(value: float) -> float:
    """A double field (power): as stored."""
    return float(value)


@dataclass(frozen=True)
class DcgmField:
    """One served metric.

    Attributes:
        name: the DCGM field identifier, which dcgm-exporter uses as the metric name.
        type: the Prometheus type dcgm-exporter gives it.
        help: the HELP text, with DCGM's unit.
        source: the key of the value in a GPU's scrape row (see the module docstring).
        convert: stored unit → DCGM's unit.
    """

    name: str
    type: Literal["gauge", "counter"]
    help: str
    source: str
    convert: Callable[[float], float | int] = whole


FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util_gpu_pct"),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "util_mem_pct"),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "util_enc_pct"),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "util_dec_pct"),
    DcgmField(
        "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "mem_used_bytes", mib
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "mem_free_bytes", mib
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        "mem_reserved_bytes",
        mib,
    ),
    DcgmField(
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "Framebuffer memory total (in MiB).",
        "mem_total_bytes",
        mib,
    ),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w", real),
    DcgmField(
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "gauge",
        "Power limit the driver enforces (in W).",
        "power_limit_w",
        real,
    ),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since the driver was last loaded (in mJ).",
        "energy_j",
        milli,
    ),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp_c"),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "mem_temp_c"),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    DcgmField(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"
    ),
    DcgmField("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", "fan_pct"),
    DcgmField("DCGM_FI_DEV_PSTATE", "gauge", "Performance state (P-State) 0-15.", "pstate"),
    DcgmField(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event reasons (bitmask of NVML's clocks event reasons).",
        "clocks_event_reasons",
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "counter",
        "PCIe TX throughput (in KB/s) via NVML.",
        "pcie_tx_bytes_per_s",
        kib,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "counter",
        "PCIe RX throughput (in KB/s) via NVML.",
        "pcie_rx_bytes_per_s",
        kib,
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "Total number of PCIe retries.",
        "pcie_replay_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe current link generation.", "pcie_link_gen"
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "gauge", "PCIe max link generation.", "pcie_link_gen_max"
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe current link width.", "pcie_link_width"
    ),
    DcgmField(
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "gauge", "PCIe max link width.", "pcie_link_width_max"
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data not including protocol headers transmitted over NVLink (in B/s).",
        "nvlink_tx_bytes_per_s",
        real,
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data not including protocol headers received over NVLink (in B/s).",
        "nvlink_rx_bytes_per_s",
        real,
    ),
    DcgmField(
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered (0: none stored).",
        "last_xid",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "ecc_corrected_volatile_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "ecc_uncorrected_volatile_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "ecc_corrected_aggregate_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "ecc_uncorrected_aggregate_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        "retired_pages_sbe_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        "retired_pages_dbe_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "counter",
        "Total number of pages pending retirement.",
        "retired_pages_pending",
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "remapped_rows_uncorrectable_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "remapped_rows_correctable_count",
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        "remapped_rows_failure",
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending",
        "remapped_rows_pending",
    ),
)

#: The inventory and event sources: every other source is a sample metric.
NOT_SAMPLED = frozenset({"mem_total_bytes", "last_xid"})
#: The catalog metrics a scrape reads from each GPU's newest sample.
SAMPLE_METRICS: tuple[str, ...] = tuple(f.source for f in FIELDS if f.source not in NOT_SAMPLED)

_PROFILING = "a DCGM profiling (DCP) counter: the agent reads NVML, which does not measure it"

#: dcgm-exporter metrics (its default files, and those of NVIDIA's dashboard 12239) that
#: ``/metrics`` does not serve → why.
NOT_SERVED: dict[str, str] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": _PROFILING
    + " (DCGM_FI_DEV_GPU_UTIL is NVML's utilization, a coarser measure)",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": _PROFILING,
    "DCGM_FI_PROF_DRAM_ACTIVE": _PROFILING,
    "DCGM_FI_PROF_SM_ACTIVE": _PROFILING,
    "DCGM_FI_PROF_SM_OCCUPANCY": _PROFILING,
    "DCGM_FI_PROF_PCIE_TX_BYTES": _PROFILING
    + " (NVML's PCIe rate is served as DCGM_FI_DEV_PCIE_TX_THROUGHPUT)",
    "DCGM_FI_PROF_PCIE_RX_BYTES": _PROFILING
    + " (NVML's PCIe rate is served as DCGM_FI_DEV_PCIE_RX_THROUGHPUT)",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "DCGM documents no unit for it and dcgm-exporter types "
    "a rate as a counter; the NVLink data rate is served as DCGM_FI_PROF_NVLINK_TX_BYTES and "
    "DCGM_FI_PROF_NVLINK_RX_BYTES (B/s)",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "the agent reads the limit the driver enforces "
    "(nvmlDeviceGetEnforcedPowerLimit), served as DCGM_FI_DEV_ENFORCED_POWER_LIMIT; the "
    "management limit set by an administrator is not read",
    "DCGM_FI_DEV_XID_ERRORS_ACTIVE": "dcgm-exporter's count of Xids per Xid and time window "
    "(DCGM_EXP_XID_ERRORS_COUNT), not a DCGM field: the Xid events are on the node and GPU "
    "pages and in the event alert rules",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "not read by the agent",
    "DCGM_FI_DEV_POWER_VIOLATION": "not read by the agent (the clock event reasons are served)",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "not read by the agent (the clock event reasons are served)",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "kept per link (the NVLink readings), not per "
    "GPU; summing 18 links of every GPU per scrape is left to the NVLink pages and alert rules",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "kept per link, see the CRC error total",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "kept per link, see the CRC error total",
}
