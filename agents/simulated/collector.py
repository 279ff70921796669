"""The simulated collector: a node shaped like a captured machine, with load and injectable faults.

Deterministic: the same hostname/seed and the same sequence of ``sample(now)`` calls give the
same samples and events. GPU UUIDs derive from the hostname alone, so they stay stable across
restarts and seeds, as real UUIDs do.
"""

from __future__ import annotations

import hashlib
import random
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from agents.collectors.base import Collector
from agents.payload import EventDict, GpuInfo, NodeInfo, Sample, make_event, utc_now
from agents.simulated.faults import APP_FATAL_XIDS, FAULT_KINDS, RANDOM_XIDS, xid_message
from agents.simulated.gpu import SimGpu
from agents.simulated.shapes import NodeShape, shape_for_gpu_count
from agents.simulated.workload import Workload

_UUID_NAMESPACE = uuid.UUID("6f1c2a4e-8a4b-4c1e-9d55-0b8f1f6a2d10")
DEFAULT_THERMAL_S = 180.0
MAX_STEP_S = 600.0
WARMUP_STEPS = 4
WARMUP_STEP_S = 30.0


def seed_from_hostname(hostname: str) -> int:
    """Return a stable 64-bit seed for ``hostname`` (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(hostname.encode("utf-8")).digest()[:8], "big")


@dataclass
class _Pending:
    kind: str
    gpu_index: int | None
    duration_s: float | None
    xid: int | None


class SimulatedCollector(Collector):
    """A simulated node of ``gpu_count`` GPUs shaped by :func:`shape_for_gpu_count` (8 → HGX
    H100, 4 → PCIe L40S) or by ``shape``; seeded from ``seed`` or the hostname.

    Thread-safe: :meth:`inject` may be called from another thread than :meth:`sample`.

    Raises:
        ValueError: ``gpu_count`` outside 0..256.
    """

    name = "simulated"

    def __init__(
        self,
        hostname: str = "sim-node",
        gpu_count: int = 8,
        *,
        shape: NodeShape | None = None,
        seed: int | None = None,
    ) -> None:
        self.hostname = hostname
        self.shape = shape or shape_for_gpu_count(gpu_count)
        self.rng = random.Random(seed_from_hostname(hostname) if seed is None else seed)
        self.gpus = [
            SimGpu(
                shape=self.shape,
                index=i,
                uuid="GPU-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{hostname}/{i}")),
                pci_bus_id=bus_id,
                rng=self.rng,
            )
            for i, bus_id in enumerate(self.shape.pci_bus_ids)
        ]
        self.workload = Workload(
            gpu_count=self.shape.gpu_count,
            rng=self.rng,
            job_sizes=(1, 2, 4, 8) if self.shape.nvlink_peak_bytes_per_s else (1, 1, 2, 4),
            video=self.shape.nvlink_peak_bytes_per_s is None,
            phase_h=self.rng.uniform(-1.5, 1.5),
        )
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._events: list[EventDict] = []
        self._last_now: datetime | None = None
        self._lost_until: dict[int, datetime | None] = {}
        self._lost_reason: dict[int, str] = {}
        self._cooling_until: dict[int, datetime] = {}
        self._paused_until: datetime | None = None

    def node_info(self) -> NodeInfo:
        """Return the driver and CUDA versions of the shape's capture."""
        return NodeInfo(
            driver_version=self.shape.driver_version, cuda_version=self.shape.cuda_version
        )

    def inventory(self) -> list[GpuInfo]:
        """Return the GPUs with their state (``lost`` while a ``gpu_lost`` fault holds)."""
        with self._lock:
            return [
                GpuInfo(
                    uuid=g.uuid,
                    index=g.index,
                    name=self.shape.gpu_name,
                    pci_bus_id=g.pci_bus_id,
                    mem_total_bytes=self.shape.mem_total_bytes,
                    mig_mode="disabled",
                    state="lost" if g.lost else "ok",
                    state_reason=self._lost_reason.get(g.index) if g.lost else None,
                )
                for g in self.gpus
            ]

    def sample(self, now: datetime) -> list[Sample]:
        """Advance the simulation to ``now`` (timezone-aware) and return one sample per GPU.

        Faults injected since the last call take effect here, dated ``now``.

        Raises:
            ValueError: ``now`` is naive.
        """
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        with self._lock:
            dt_s = 0.0
            first = self._last_now is None
            if self._last_now is not None:
                dt_s = min(MAX_STEP_S, max(0.0, (now - self._last_now).total_seconds()))
            self._last_now = now
            self._expire_faults(now)
            for pending in self._pending:
                self._apply(pending, now)
            self._pending.clear()
            now_s = now.timestamp()
            lost = frozenset(g.index for g in self.gpus if g.lost)
            self.workload.step(now_s, dt_s, unavailable=lost)
            samples = []
            for gpu in self.gpus:
                if first:
                    # Start in steady state, as a node that was running before the agent started.
                    for _ in range(WARMUP_STEPS):
                        gpu.step(WARMUP_STEP_S, self.workload.job_on(gpu.index), now_s)
                before = gpu.thermal_reasons
                gpu.step(dt_s, self.workload.job_on(gpu.index), now_s)
                if gpu.thermal_reasons and not before:
                    self._thermal_event(gpu, now)
                samples.append(gpu.read(now))
            return samples

    def drain_events(self) -> list[EventDict]:
        """Return and forget the events produced since the last call."""
        with self._lock:
            events, self._events = self._events, []
            return events

    def paused_until(self) -> datetime | None:
        """Return the end of an ``agent_stop`` fault still in force, else ``None``."""
        with self._lock:
            if self._paused_until is not None and self._paused_until <= utc_now():
                self._paused_until = None
            return self._paused_until

    def inject(
        self,
        kind: str,
        gpu_index: int | None = None,
        duration_s: float | None = None,
        xid: int | None = None,
    ) -> None:
        """Inject a fault; GPU faults take effect at the next :meth:`sample`.

        Kinds: ``gpu_lost`` (state ``lost``, metrics null, events ``xid`` 79 then ``gpu_lost``;
        recovers after ``duration_s`` like a reset GPU, never when ``None``); ``xid`` (one Xid
        event of code ``xid``, random from :data:`RANDOM_XIDS` when ``None``; 79 acts as
        ``gpu_lost``, 48 counts an uncorrectable ECC error, application Xids end the job);
        ``thermal_throttle`` (cooling fails for ``duration_s``, default 180 s: temperature climbs
        to ~90 °C, clocks drop, reasons 0x20/0x40, a ``thermal_throttle`` event); ``agent_stop``
        (no collecting or pushing for ``duration_s``, default 60-120 s, from now).
        ``gpu_index`` ``None`` picks a GPU at random (a busy one for ``thermal_throttle``).

        Raises:
            ValueError: unknown ``kind``, or ``gpu_index`` not a GPU of this node.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if gpu_index is not None and not 0 <= gpu_index < len(self.gpus):
            raise ValueError(f"gpu_index {gpu_index} out of range 0..{len(self.gpus) - 1}")
        with self._lock:
            if kind == "agent_stop":
                seconds = duration_s if duration_s is not None else self.rng.uniform(60.0, 120.0)
                self._paused_until = utc_now() + timedelta(seconds=seconds)
                return
            self._pending.append(_Pending(kind, gpu_index, duration_s, xid))

    def _apply(self, fault: _Pending, now: datetime) -> None:
        if not self.gpus:
            return
        gpu = self._pick_gpu(fault)
        if fault.kind == "xid":
            code = fault.xid if fault.xid is not None else self.rng.choice(RANDOM_XIDS)
            if code != 79:
                self._xid(gpu, code, now)
                return
        if fault.kind in ("gpu_lost", "xid"):
            self._lose(gpu, now, fault.duration_s)
        elif fault.kind == "thermal_throttle":
            seconds = fault.duration_s if fault.duration_s is not None else DEFAULT_THERMAL_S
            gpu.cooling_failed = True
            self._cooling_until[gpu.index] = now + timedelta(seconds=seconds)

    def _pick_gpu(self, fault: _Pending) -> SimGpu:
        if fault.gpu_index is not None:
            return self.gpus[fault.gpu_index]
        candidates = [g for g in self.gpus if not g.lost] or self.gpus
        if fault.kind == "thermal_throttle":
            busy = [g for g in candidates if self.workload.job_on(g.index) is not None]
            candidates = busy or candidates
        return self.rng.choice(candidates)

    def _xid(self, gpu: SimGpu, code: int, now: datetime) -> None:
        job = self.workload.job_on(gpu.index)
        process = (job.pid, job.process_name) if job is not None else None
        message = xid_message(
            code, gpu.pci_bus_id, gpu_index=gpu.index, rng=self.rng, process=process
        )
        self._events.append(
            make_event(
                "xid", now, gpu_uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, xid=code, message=message
            )
        )
        if code == 48:
            gpu.record_uncorrected_ecc()
        if code in APP_FATAL_XIDS:
            self.workload.kill_job_on(gpu.index)

    def _lose(self, gpu: SimGpu, now: datetime, duration_s: float | None) -> None:
        if gpu.lost:
            return
        self._xid(gpu, 79, now)
        self.workload.kill_job_on(gpu.index)
        gpu.lost = True
        reason = "NVML_ERROR_GPU_IS_LOST: GPU has fallen off the bus (Xid 79)"
        self._lost_reason[gpu.index] = reason
        self._lost_until[gpu.index] = (
            None if duration_s is None else now + timedelta(seconds=duration_s)
        )
        self._events.append(
            make_event(
                "gpu_lost",
                now,
                gpu_uuid=gpu.uuid,
                pci_bus_id=gpu.pci_bus_id,
                message=f"GPU {gpu.pci_bus_id} is lost: {reason}",
            )
        )

    def _thermal_event(self, gpu: SimGpu, now: datetime) -> None:
        self._events.append(
            make_event(
                "thermal_throttle",
                now,
                gpu_uuid=gpu.uuid,
                pci_bus_id=gpu.pci_bus_id,
                message=(
                    f"GPU temperature {gpu.temp_c:.0f} C: thermal slowdown active, "
                    f"clocks event reasons 0x{gpu.reasons:x}, SM clock {gpu.sm_clock_mhz} MHz"
                ),
            )
        )

    def _expire_faults(self, now: datetime) -> None:
        for index, until in list(self._lost_until.items()):
            if until is not None and until <= now:
                self.gpus[index].reset()
                del self._lost_until[index]
                self._lost_reason.pop(index, None)
        for index, until in list(self._cooling_until.items()):
            if until <= now:
                self.gpus[index].cooling_failed = False
                del self._cooling_until[index]
