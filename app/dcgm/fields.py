"""Which dcgm-exporter series Fleetwatch takes, into which field, and why the others are not.

Units are DCGM's (the field descriptions in ``dcgm_fields.h`` and dcgm-exporter's
``default-counters.csv``): framebuffer sizes in MiB, power in W, energy in mJ, clocks in MHz,
``DCGM_FI_PROF_PCIE_*_BYTES`` / ``DCGM_FI_PROF_NVLINK_*_BYTES`` in bytes per second,
``DCGM_FI_DEV_PCIE_*_THROUGHPUT`` in KB/s (NVML's ``nvmlDeviceGetPcieThroughput``, 1,024
bytes). Fleetwatch's own ``/metrics`` (:mod:`app.exporter.dcgm`) serves the same names in
the same units, so a Fleetwatch server can be scraped by another one. Each
:class:`SampleField` gives the factor to Fleetwatch's unit (``*_bytes``, ``*_j`` …). The table
in ``docs/dcgm-pull.md`` is this module in prose; a test holds them together.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.dcgm.blanks import Kind
from app.metrics.catalog import METRICS_BY_NAME

MIB = 1024 * 1024


@dataclass(frozen=True)
class SampleField:
    """A DCGM field stored as a GPU sample metric.

    Attributes:
        dcgm: the series name (``DCGM_FI_…``).
        metric: the :data:`app.metrics.catalog.METRICS` name it fills.
        factor, divisor: DCGM's value times ``factor`` over ``divisor`` is in Fleetwatch's
            unit (two whole numbers, so MiB → bytes stays an exact integer).
        kind: DCGM's storage type, for the blank sentinels (:mod:`app.dcgm.blanks`).
        rank: where two fields fill one metric, the lower rank wins.
    """

    dcgm: str
    metric: str
    factor: int = 1
    divisor: int = 1
    kind: Kind = "int64"
    rank: int = 0


SAMPLE_FIELDS: tuple[SampleField, ...] = (
    SampleField("DCGM_FI_DEV_GPU_UTIL", "util_gpu_pct"),
    SampleField("DCGM_FI_DEV_MEM_COPY_UTIL", "util_mem_pct"),
    SampleField("DCGM_FI_DEV_ENC_UTIL", "util_enc_pct"),
    SampleField("DCGM_FI_DEV_DEC_UTIL", "util_dec_pct"),
    SampleField("DCGM_FI_DEV_FB_USED", "mem_used_bytes", MIB),
    SampleField("DCGM_FI_DEV_FB_FREE", "mem_free_bytes", MIB),
    SampleField("DCGM_FI_DEV_FB_RESERVED", "mem_reserved_bytes", MIB),
    SampleField("DCGM_FI_DEV_POWER_USAGE", "power_w", kind="fp64"),
    SampleField("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "power_limit_w", kind="fp64"),
    # The limit set by the operator; the enforced one is the same unless a board or system
    # limit is lower, so it stands in only where the enforced one is not served.
    SampleField("DCGM_FI_DEV_POWER_MGMT_LIMIT", "power_limit_w", kind="fp64", rank=1),
    SampleField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", divisor=1000),
    SampleField("DCGM_FI_DEV_GPU_TEMP", "temp_c"),
    SampleField("DCGM_FI_DEV_MEMORY_TEMP", "mem_temp_c"),
    SampleField("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz"),
    SampleField("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz"),
    SampleField("DCGM_FI_DEV_FAN_SPEED", "fan_pct"),
    SampleField("DCGM_FI_DEV_PSTATE", "pstate"),
    SampleField("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clocks_event_reasons"),
    SampleField("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clocks_event_reasons", rank=1),
    # NVML's PCIe rate in KB/s (1,024 bytes), what the agents read; the profiling rate
    # (protocol headers included) stands in where it is not served.
    SampleField("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "pcie_tx_bytes_per_s", 1024),
    SampleField("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "pcie_rx_bytes_per_s", 1024),
    SampleField("DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_bytes_per_s", rank=1),
    SampleField("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bytes_per_s", rank=1),
    SampleField("DCGM_FI_PROF_NVLINK_TX_BYTES", "nvlink_tx_bytes_per_s"),
    SampleField("DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink_rx_bytes_per_s"),
    SampleField("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_corrected_volatile_count"),
    SampleField("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrected_volatile_count"),
    SampleField("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "ecc_corrected_aggregate_count"),
    SampleField("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "ecc_uncorrected_aggregate_count"),
    SampleField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay_count"),
    SampleField("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie_link_gen"),
    SampleField("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "pcie_link_gen_max"),
    SampleField("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie_link_width"),
    SampleField("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "pcie_link_width_max"),
    SampleField("DCGM_FI_DEV_RETIRED_SBE", "retired_pages_sbe_count"),
    SampleField("DCGM_FI_DEV_RETIRED_DBE", "retired_pages_dbe_count"),
    SampleField("DCGM_FI_DEV_RETIRED_PENDING", "retired_pages_pending"),
    SampleField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows_correctable_count"),
    SampleField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows_uncorrectable_count"),
    SampleField("DCGM_FI_DEV_ROW_REMAP_PENDING", "remapped_rows_pending"),
    SampleField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "remapped_rows_failure"),
)
SAMPLE_FIELDS_BY_NAME: dict[str, SampleField] = {f.dcgm: f for f in SAMPLE_FIELDS}

#: The framebuffer size (MiB) goes to the GPU's inventory ``mem_total_bytes`` (a MIG instance's
#: to its entry's), not to a sample.
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
#: The last Xid DCGM saw on the GPU, 0 for none: a gauge (:mod:`app.dcgm.xid`).
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"
#: The count of one Xid (label ``xid``) within a window (label ``window_size_in_ms``):
#: dcgm-exporter's ``xid-count-window-size`` option. The HELP/TYPE name and the samples' name
#: differ in the exporter's own example (PR 239), so both are read.
XID_COUNTS = frozenset({"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS_ACTIVE"})

_PROFILING = (
    "a profiling (DCP) ratio or rate Fleetwatch has no column for; its agents do not read DCP"
)
_VIOLATION = "a throttling-time counter (µs) Fleetwatch has no column for; see clocks_event_reasons"
_NVLINK_LINK = (
    "a per-link NVLink counter: Fleetwatch's nvlinks section needs the link number and peer, "
    "which dcgm-exporter does not label"
)

#: DCGM fields known and left out on purpose, with the reason shown for each skipped series.
NOT_TAKEN: dict[str, str] = {
    **dict.fromkeys(
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "DCGM_FI_PROF_SM_ACTIVE",
            "DCGM_FI_PROF_SM_OCCUPANCY",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
            "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
            "DCGM_FI_PROF_PIPE_INT_ACTIVE",
            "DCGM_FI_PROF_NVDEC0_ACTIVE",
            "DCGM_FI_PROF_NVJPG0_ACTIVE",
            "DCGM_FI_PROF_NVOFA0_ACTIVE",
        ),
        _PROFILING,
    ),
    **dict.fromkeys(
        (
            "DCGM_FI_DEV_POWER_VIOLATION",
            "DCGM_FI_DEV_THERMAL_VIOLATION",
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
            "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
            "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
            "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        ),
        _VIOLATION,
    ),
    **dict.fromkeys(
        (
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        ),
        _NVLINK_LINK,
    ),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (
        "all links' traffic in one counter, without a TX/RX split; nvlink_tx/rx_bytes_per_s "
        "come from DCGM_FI_PROF_NVLINK_TX_BYTES/RX_BYTES"
    ),
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU licence state: Fleetwatch has no field for it",
    "DCGM_FI_DEV_APP_SM_CLOCK": "an application clock target, not the current clock",
    "DCGM_FI_DEV_APP_MEM_CLOCK": "an application clock target, not the current clock",
    "DCGM_FI_DEV_VIDEO_CLOCK": "Fleetwatch has no video clock column",
    "DCGM_FI_DEV_GPU_MAX_OP_TEMP": "a fixed threshold, not a reading",
    "DCGM_FI_DEV_SLOWDOWN_TEMP": "a fixed threshold, not a reading",
    "DCGM_FI_DEV_SHUTDOWN_TEMP": "a fixed threshold, not a reading",
}

#: The reason for a DCGM field in neither table.
UNKNOWN = "not a DCGM field Fleetwatch maps (docs/dcgm-pull.md lists those it takes)"
#: The reason for a MIG instance's value of a per-GPU sample field.
MIG_VALUE = (
    "a MIG instance's value: Fleetwatch stores samples per GPU (the instance is listed under "
    "its GPU; the GPU's own series fill its sample)"
)


_BY_DESIGN = frozenset({*NOT_TAKEN.values(), UNKNOWN, MIG_VALUE})


def by_design(reason: str) -> bool:
    """Whether a skip ``reason`` is Fleetwatch's choice (a field it does not map, a MIG
    instance's per-GPU value, a stand-in beaten by the field it stands in for) rather than a
    problem with the page."""
    return reason in _BY_DESIGN or reason.endswith("is served and taken instead")


def check_table() -> None:
    """Every sample field names a catalog metric (run by the tests).

    Raises:
        ValueError: naming the field whose metric is not in the catalog.
    """
    for field in SAMPLE_FIELDS:
        if field.metric not in METRICS_BY_NAME:
            raise ValueError(f"{field.dcgm} names {field.metric}, not a catalog metric")
