"""Whether what the NVML binding returned can be true, before it is sent.

When nvidia-ml-py and the driver disagree on a struct's layout (``nvmlProcessInfo_t`` grew a
field between versions), fields are read at the wrong offsets: PIDs of 0 or billions, memory
sizes beyond the GPU's, NVML's "not available" sentinels (``0xFFFFFFFF``,
``NVML_VALUE_NOT_AVAILABLE``) taken for values. Such a value is never sent: a metric becomes
``None`` with the reason ``IMPLAUSIBLE`` in ``unavailable``, a process with an impossible PID is
left out (the PID is what names it), any other impossible number becomes ``None``. Each kind of
implausible value is logged once per GPU, not at every sample.

The metric ranges are the server's (``docs/ingest.md``, "Metrics and their plausible ranges"):
a value the server would null is not worth sending.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

#: PID_MAX_LIMIT on 64-bit Linux: ``/proc/sys/kernel/pid_max`` cannot be set above it.
MAX_PID = 4_194_304
#: ``NVML_VALUE_NOT_AVAILABLE`` as the unsigned long long fields carry it.
NOT_AVAILABLE = 2**64 - 1
#: The largest memory size the server stores (bytes); a GPU's own total is tighter.
MAX_MEMORY_BYTES = 2**50
#: A MIG GPU or compute instance id (the server accepts 0-1023).
MAX_INSTANCE_ID = 1023
IMPLAUSIBLE = "IMPLAUSIBLE"
_MEMORY_METRICS = ("mem_used_bytes", "mem_free_bytes", "mem_reserved_bytes")

#: metric → (low, high, integer-only), the closed plausible range of each sample metric.
METRIC_BOUNDS: dict[str, tuple[float, float, bool]] = {
    **dict.fromkeys(
        ("util_gpu_pct", "util_mem_pct", "util_enc_pct", "util_dec_pct"), (0, 100, False)
    ),
    **dict.fromkeys(_MEMORY_METRICS, (0, MAX_MEMORY_BYTES, False)),
    "power_w": (0, 5000, False),
    "power_limit_w": (0, 5000, False),
    "energy_j": (0, 1e15, False),
    "temp_c": (-40, 200, False),
    "mem_temp_c": (-40, 200, False),
    **dict.fromkeys(("sm_clock_mhz", "mem_clock_mhz", "graphics_clock_mhz"), (0, 20000, False)),
    "fan_pct": (0, 150, False),
    "pstate": (0, 15, True),
    "clocks_event_reasons": (0, 2**40, True),
    "pcie_tx_bytes_per_s": (0, 1e12, False),
    "pcie_rx_bytes_per_s": (0, 1e12, False),
    "nvlink_tx_bytes_per_s": (0, 1e13, False),
    "nvlink_rx_bytes_per_s": (0, 1e13, False),
    **dict.fromkeys(
        (
            "ecc_corrected_volatile_count",
            "ecc_uncorrected_volatile_count",
            "ecc_corrected_aggregate_count",
            "ecc_uncorrected_aggregate_count",
            "pcie_replay_count",
        ),
        (0, 1e9, True),
    ),
    **dict.fromkeys(("pcie_link_gen", "pcie_link_gen_max"), (1, 8, True)),
    **dict.fromkeys(("pcie_link_width", "pcie_link_width_max"), (1, 64, True)),
    **dict.fromkeys(
        (
            "retired_pages_sbe_count",
            "retired_pages_dbe_count",
            "remapped_rows_correctable_count",
            "remapped_rows_uncorrectable_count",
        ),
        (0, 1e6, True),
    ),
    **dict.fromkeys(
        ("retired_pages_pending", "remapped_rows_pending", "remapped_rows_failure"), (0, 1, True)
    ),
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def in_range(value: Any, low: float, high: float, *, integer: bool = False) -> bool:
    """Whether ``value`` is a number (not a bool, not NaN) in ``[low, high]``, whole if
    ``integer``."""
    if not _number(value) or not low <= value <= high:
        return False
    return not integer or float(value).is_integer()


class Plausibility:
    """The checks for one collector; remembers which (GPU, kind) it has logged."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def note(self, gpu: str, kind: str, detail: str) -> None:
        """Log an implausible ``kind`` of value on ``gpu`` the first time only."""
        if (gpu, kind) in self._logged:
            return
        self._logged.add((gpu, kind))
        log.warning(
            "GPU %s: implausible %s from the NVML binding (%s), not sent; an nvidia-ml-py that "
            "does not match the driver reads its structs wrongly",
            gpu,
            kind,
            detail,
        )

    def memory_size(self, gpu: str, kind: str, value: Any, *, total: int | None) -> Any:
        """``value`` (bytes) if it is a size the GPU can hold (``total``, else 2**50), else
        ``None`` (logged as ``kind``)."""
        if value is None or in_range(value, 0, total or MAX_MEMORY_BYTES, integer=True):
            return value
        self.note(gpu, kind, f"{value!r} bytes, the GPU has {total or 'unknown'}")
        return None

    def metrics(
        self, gpu: str, metrics: dict[str, Any], reasons: dict[str, str], *, total: int | None
    ) -> None:
        """Set each metric of ``metrics`` outside its range (memory beyond ``total``) to
        ``None`` in place, with the reason ``IMPLAUSIBLE`` in ``reasons``."""
        for key, value in metrics.items():
            bound = METRIC_BOUNDS.get(key)
            if value is None or bound is None:
                continue
            low, high, integer = bound
            if key in _MEMORY_METRICS and total:
                high = total
            if not in_range(value, low, high, integer=integer):
                self.note(gpu, key, f"{value!r}, plausible {low:g} to {high:g}")
                metrics[key], reasons[key] = None, IMPLAUSIBLE

    def processes(
        self, gpu: str, processes: list[dict[str, Any]], *, total: int | None
    ) -> list[dict[str, Any]]:
        """The processes with a possible PID (1 to :data:`MAX_PID`), their impossible memory
        sizes ``None``."""
        kept = []
        for process in processes:
            pid = process["pid"]
            if not in_range(pid, 1, MAX_PID, integer=True):
                self.note(gpu, "process PID", f"{pid!r}, Linux PIDs are 1 to {MAX_PID}")
                continue
            used = process["used_memory_bytes"]
            process["used_memory_bytes"] = self.memory_size(
                gpu, "process memory", used, total=total
            )
            kept.append(process)
        return kept

    def mig_instance(self, gpu: str, instance: dict[str, Any], *, total: int | None) -> None:
        """Set a MIG instance's impossible ids and memory sizes to ``None`` in place."""
        for key in ("gpu_instance_id", "compute_instance_id"):
            value = instance[key]
            if value is not None and not in_range(value, 0, MAX_INSTANCE_ID, integer=True):
                self.note(gpu, f"MIG {key}", f"{value!r}, plausible 0 to {MAX_INSTANCE_ID}")
                instance[key] = None
        for key in ("mem_total_bytes", "mem_used_bytes"):
            instance[key] = self.memory_size(gpu, f"MIG {key}", instance[key], total=total)
