"""One simulated GPU's physics: utilization → clocks → power → temperature, plus counters.

Power follows utilization between the idle draw and near the limit; temperature lags power with
a first-order response; the SM clock sits near its maximum under load and drops when thermally
throttled; energy integrates power; ECC and PCIe replay counters occasionally step up. An
uncorrectable ECC error (Xid 48) marks a row for remapping, pending until the GPU is reset.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime

from agents.payload import EXTRA_METRIC_KEYS, Sample, empty_sample
from agents.simulated.faults import (
    CLOCKS_EVENT_REASON_GPU_IDLE,
    CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN,
    CLOCKS_EVENT_REASON_SW_POWER_CAP,
    CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN,
)
from agents.simulated.shapes import NodeShape
from agents.simulated.workload import Job

TEMP_TAU_S = 25.0  # thermal time constant of a GPU and its heat sink
UTIL_TAU_S = 3.0
MEM_TAU_S = 10.0
SW_THERMAL_C = 87.0  # above this the driver lowers clocks (SW thermal slowdown, 0x20)
HW_THERMAL_C = 90.0  # above this the hardware slows down (HW thermal slowdown, 0x40)
COOLING_FAILURE_TARGET_C = 96.0  # where a thermal fault would drive the GPU without throttling
ECC_CORRECTED_MEAN_S = 4 * 3600.0
PCIE_REPLAY_MEAN_S = 12 * 3600.0

#: Why metrics are null on the captured H100 and L40S (both report retired pages as [N/A]:
#: they remap rows instead; neither has a fan reading).
UNAVAILABLE: dict[str, str] = {
    "fan_pct": "NOT_SUPPORTED",
    "retired_pages_sbe_count": "NOT_SUPPORTED",
    "retired_pages_dbe_count": "NOT_SUPPORTED",
    "retired_pages_pending": "NOT_SUPPORTED",
}


def _lag(current: float, target: float, dt_s: float, tau_s: float) -> float:
    """First-order response of ``current`` towards ``target`` over ``dt_s``."""
    return target + (current - target) * math.exp(-dt_s / tau_s)


@dataclass
class SimGpu:
    """The state of one simulated GPU; :meth:`step` advances it, :meth:`read` samples it."""

    shape: NodeShape
    index: int
    uuid: str
    pci_bus_id: str
    rng: random.Random
    util_pct: float = 0.0
    mem_used_bytes: float = 0.0
    power_w: float = 0.0
    temp_c: float = 0.0
    energy_j: float = 0.0
    sm_clock_mhz: int = 0
    reasons: int = CLOCKS_EVENT_REASON_GPU_IDLE
    ecc_corrected_volatile: int = 0
    ecc_uncorrected_volatile: int = 0
    ecc_corrected_aggregate: int = 0
    ecc_uncorrected_aggregate: int = 0
    pcie_replays: int = 0
    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    nvlink_tx: float = 0.0
    nvlink_rx: float = 0.0
    enc_pct: float = 0.0
    mem_util_pct: float = 0.0
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    nvlink_up_ratio: float = 1.0
    cooling_failed: bool = False
    lost: bool = False

    def __post_init__(self) -> None:
        self.power_w = self.shape.power_idle_w
        self.temp_c = self.shape.temp_idle_c + self.rng.uniform(-1.0, 1.0)
        self.sm_clock_mhz = self.shape.sm_clock_idle_mhz
        # Energy since the driver loaded: days of uptime at a few hundred watts.
        self.energy_j = self.rng.uniform(1.0, 30.0) * 86400 * self.shape.power_limit_w * 0.4
        self.ecc_corrected_aggregate = self.rng.choice((0, 0, 0, 1, 2, 5))
        self.pcie_replays = self.rng.choice((0, 0, 0, 1, 3))

    @property
    def thermal_reasons(self) -> int:
        """The thermal bits of the current clocks event reasons (0x20 | 0x40 or 0)."""
        return self.reasons & (
            CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN | CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN
        )

    def step(self, dt_s: float, job: Job | None, now_s: float) -> None:
        """Advance ``dt_s`` seconds with ``job`` (or none) running on this GPU at POSIX
        ``now_s``. A lost GPU does not change."""
        if self.lost:
            return
        shape, rng = self.shape, self.rng
        self.energy_j += self.power_w * dt_s
        target_util = 0.0
        if job is not None:
            target_util = job.util_pct if job.dip_until <= now_s else rng.uniform(5.0, 30.0)
        self.util_pct = _lag(self.util_pct, target_util, dt_s, UTIL_TAU_S)
        if job is not None:
            self.util_pct = min(100.0, max(0.0, self.util_pct + rng.uniform(-3.0, 3.0)))
        elif self.util_pct < 0.5:
            self.util_pct = 0.0
        usable = shape.mem_total_bytes - shape.mem_reserved_bytes
        target_mem = usable * job.mem_fraction if job is not None else 0.0
        self.mem_used_bytes = _lag(self.mem_used_bytes, target_mem, dt_s, MEM_TAU_S)
        if job is None and self.mem_used_bytes < 4 * 1024 * 1024:
            self.mem_used_bytes = 0.0
        load = self.util_pct / 100.0

        reasons = 0
        if self.temp_c >= HW_THERMAL_C:
            reasons |= (
                CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN | CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN
            )
            clock_ratio = rng.uniform(0.55, 0.65)
        elif self.temp_c >= SW_THERMAL_C:
            reasons |= CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN
            clock_ratio = rng.uniform(0.78, 0.85)
        else:
            clock_ratio = 1.0 if rng.random() > 0.1 else 0.985
        if load <= 0.0:
            reasons |= CLOCKS_EVENT_REASON_GPU_IDLE
            clock = float(shape.sm_clock_idle_mhz)
        else:
            clock = shape.sm_clock_max_mhz * clock_ratio

        power = shape.power_idle_w + (shape.power_limit_w * 0.95 - shape.power_idle_w) * (
            load**0.8
        ) * (clock / shape.sm_clock_max_mhz if load > 0 else 1.0)
        power *= rng.uniform(0.985, 1.015)
        if power > shape.power_limit_w * 0.97:
            power = shape.power_limit_w * rng.uniform(0.95, 0.97)
            reasons |= CLOCKS_EVENT_REASON_SW_POWER_CAP
            clock *= 0.97
        self.power_w = power
        self.sm_clock_mhz = int(round(clock / 15.0) * 15)
        self.reasons = reasons

        heat = (power - shape.power_idle_w) / (shape.power_limit_w - shape.power_idle_w)
        target_temp = shape.temp_idle_c + (shape.temp_load_c - shape.temp_idle_c) * heat
        if self.cooling_failed:
            target_temp = max(target_temp, COOLING_FAILURE_TARGET_C)
        self.temp_c = _lag(self.temp_c, target_temp, dt_s, TEMP_TAU_S)
        if reasons & CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN:
            # The hardware slowdown holds the die just above its threshold.
            self.temp_c = min(self.temp_c, HW_THERMAL_C + 2.0)

        self._traffic(job, load)
        self._counters(dt_s)

    def _traffic(self, job: Job | None, load: float) -> None:
        shape, rng = self.shape, self.rng
        if job is None:
            # Idle PCIe chatter, as in the idle H100 capture (tx 509 KB/s, rx 341 KB/s).
            self.pcie_tx, self.pcie_rx = rng.uniform(300e3, 600e3), rng.uniform(200e3, 400e3)
            self.nvlink_tx = self.nvlink_rx = 0.0
            self.mem_util_pct = self.enc_pct = 0.0
            return
        jitter = rng.uniform(0.8, 1.2)
        self.pcie_tx = shape.pcie_peak_bytes_per_s * job.pcie_share * load * jitter
        self.pcie_rx = self.pcie_tx * rng.uniform(0.6, 1.4)
        comm = (shape.nvlink_peak_bytes_per_s or 0.0) * job.comm_share * load
        comm *= self.nvlink_up_ratio
        self.nvlink_tx = comm * jitter
        self.nvlink_rx = comm * rng.uniform(0.9, 1.1)
        self.mem_util_pct = min(100.0, self.util_pct * job.mem_intensity)
        self.enc_pct = job.enc_pct * rng.uniform(0.9, 1.1) if job.enc_pct else 0.0

    def _counters(self, dt_s: float) -> None:
        if self.rng.random() < dt_s / ECC_CORRECTED_MEAN_S:
            self.ecc_corrected_volatile += 1
            self.ecc_corrected_aggregate += 1
        if self.rng.random() < dt_s / PCIE_REPLAY_MEAN_S:
            self.pcie_replays += 1

    def record_uncorrected_ecc(self) -> None:
        """Count one uncorrectable (double-bit) ECC error, as behind an Xid 48: its row is
        remapped at the next GPU reset (pending until then)."""
        self.ecc_uncorrected_volatile += 1
        self.ecc_uncorrected_aggregate += 1
        self.remapped_uncorrectable += 1
        self.remap_pending = True

    def unavailable(self) -> dict[str, str]:
        """Metric → NVML return code name, for the metrics this GPU never reports."""
        reasons = dict(UNAVAILABLE)
        if self.shape.mem_temp_offset_c is None:
            reasons["mem_temp_c"] = "NOT_SUPPORTED"
        if self.shape.nvlink_peak_bytes_per_s is None:
            reasons["nvlink_tx_bytes_per_s"] = reasons["nvlink_rx_bytes_per_s"] = "NOT_SUPPORTED"
        return reasons

    def reset(self) -> None:
        """Bring a lost GPU back as after a GPU reset: idle, cool, volatile ECC counts cleared."""
        self.lost = False
        self.util_pct = self.mem_used_bytes = 0.0
        self.power_w = self.shape.power_idle_w
        self.temp_c = self.shape.temp_idle_c
        self.sm_clock_mhz = self.shape.sm_clock_idle_mhz
        self.reasons = CLOCKS_EVENT_REASON_GPU_IDLE
        self.ecc_corrected_volatile = self.ecc_uncorrected_volatile = 0
        self.remap_pending = False

    def read(self, now: datetime) -> Sample:
        """Return the sample of this GPU at ``now``; every metric ``None`` when lost.

        Throughputs are whole KB/s × 1024 as ``nvmlDeviceGetPcieThroughput`` gives them.
        """
        sample = empty_sample(self.uuid, now)
        sample.update(dict.fromkeys(EXTRA_METRIC_KEYS))
        if self.lost:
            return sample
        shape = self.shape
        free = shape.mem_total_bytes - shape.mem_reserved_bytes - int(self.mem_used_bytes)
        mem_temp = None
        if shape.mem_temp_offset_c is not None:
            mem_temp = round(self.temp_c + shape.mem_temp_offset_c * (1.0 - self.util_pct / 250))
        has_nvlink = shape.nvlink_peak_bytes_per_s is not None
        sample.update(
            util_gpu_pct=round(self.util_pct),
            util_mem_pct=round(self.mem_util_pct),
            util_enc_pct=round(self.enc_pct),
            util_dec_pct=0,
            mem_used_bytes=int(self.mem_used_bytes) // (1024 * 1024) * 1024 * 1024,
            mem_free_bytes=max(0, free) // (1024 * 1024) * 1024 * 1024,
            mem_reserved_bytes=shape.mem_reserved_bytes,
            power_w=round(self.power_w, 2),
            power_limit_w=shape.power_limit_w,
            energy_j=round(self.energy_j, 3),
            temp_c=round(self.temp_c),
            mem_temp_c=mem_temp,
            sm_clock_mhz=self.sm_clock_mhz,
            mem_clock_mhz=shape.mem_clock_mhz,
            graphics_clock_mhz=self.sm_clock_mhz,
            fan_pct=None,
            pstate=0,
            clocks_event_reasons=self.reasons,
            pcie_tx_bytes_per_s=int(self.pcie_tx) // 1024 * 1024,
            pcie_rx_bytes_per_s=int(self.pcie_rx) // 1024 * 1024,
            nvlink_tx_bytes_per_s=int(self.nvlink_tx) if has_nvlink else None,
            nvlink_rx_bytes_per_s=int(self.nvlink_rx) if has_nvlink else None,
            ecc_corrected_volatile_count=self.ecc_corrected_volatile,
            ecc_uncorrected_volatile_count=self.ecc_uncorrected_volatile,
            ecc_corrected_aggregate_count=self.ecc_corrected_aggregate,
            ecc_uncorrected_aggregate_count=self.ecc_uncorrected_aggregate,
            pcie_replay_count=self.pcie_replays,
            pcie_link_gen=shape.pcie_gen_max,
            pcie_link_gen_max=shape.pcie_gen_max,
            pcie_link_width=16,
            pcie_link_width_max=16,
            remapped_rows_correctable_count=self.remapped_correctable,
            remapped_rows_uncorrectable_count=self.remapped_uncorrectable,
            remapped_rows_pending=int(self.remap_pending),
            remapped_rows_failure=0,
        )
        return sample
