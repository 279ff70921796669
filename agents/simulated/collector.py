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
from datetime import datetime, timedelta
from typing import Any

from agents.collectors.base import Collector
from agents.payload import EventDict, GpuInfo, NodeInfo, Sample, utc_now
from agents.simulated.faults import GPU_FAULT_KINDS, HOST_FAULT_KINDS
from agents.simulated.gpu import SimGpu
from agents.simulated.gpu_faults import GpuFaults, Pending
from agents.simulated.inventory import gpu_inventory
from agents.simulated.links import SimLinks
from agents.simulated.shapes import NodeShape, shape_for_gpu_count
from agents.simulated.workload import Workload

_UUID_NAMESPACE = uuid.UUID("6f1c2a4e-8a4b-4c1e-9d55-0b8f1f6a2d10")
MAX_STEP_S = 600.0
WARMUP_STEPS = 4
WARMUP_STEP_S = 30.0
#: Fault kinds a real node announces in its kernel log the moment they happen (Xid 79, the
#: Xid itself, Xid 74 for a link), so its agent sends them before the next sampling tick.
URGENT_FAULT_KINDS = frozenset({"gpu_lost", "xid", "nvlink_down", "off_bus", "xid_repeat"})


def seed_from_hostname(hostname: str) -> int:
    """Return a stable 64-bit seed for ``hostname`` (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.sha256(hostname.encode("utf-8")).digest()[:8], "big")


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
        self._last_now: datetime | None = None
        self._paused_until: datetime | None = None
        # Own random source, so reading links never shifts the GPUs' sample stream.
        self.links = SimLinks(self.shape, random.Random(self.rng.getrandbits(64)))
        self._links_read_at: datetime | None = None
        self.faults = GpuFaults(
            shape=self.shape, gpus=self.gpus, workload=self.workload, links=self.links, rng=self.rng
        )

    def node_info(self) -> NodeInfo:
        """Return the driver and CUDA versions of the shape's capture, and its GPU count (what
        a real node's PCI bus shows, whatever the driver enumerates)."""
        return NodeInfo(
            driver_version=self.shape.driver_version,
            cuda_version=self.shape.cuda_version,
            expected_gpu_count=len(self.gpus),
        )

    def inventory(self) -> list[GpuInfo]:
        """Return the GPUs with their state (``lost`` while a ``gpu_lost`` fault holds), the
        metrics they never report and their jobs' processes."""
        with self._lock:
            return gpu_inventory(
                self.shape, self._enumerated(), self.workload, self.faults.lost_reason
            )

    def _enumerated(self) -> list[SimGpu]:
        """The GPUs the driver lists: all but those of a ``lost_at_start`` fault."""
        return [g for g in self.gpus if g.index not in self.faults.absent]

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
            self.faults.expire(now)
            self.faults.apply_pending(now)
            now_s = now.timestamp()
            lost = frozenset(g.index for g in self.gpus if g.lost) | self.faults.absent
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
                    self.faults.thermal_event(gpu, now)
                # A hung NVML call gives the agent no sample; an absent GPU is not listed.
                if not self.faults.hung(gpu) and gpu.index not in self.faults.absent:
                    samples.append(gpu.read(now))
            return samples

    def collection_errors(self) -> list[dict[str, str]]:
        """The errors the NVML collector reports each round for the GPUs whose NVML call hangs
        (``nvml_hang``)."""
        with self._lock:
            return self.faults.hang_errors()

    def drain_events(self) -> list[EventDict]:
        """Return and forget the events produced since the last call."""
        with self._lock:
            events, self.faults.events = self.faults.events, []
            return events

    def urgent_pending(self) -> bool:
        """Whether an injected fault that a real node announces at once in its kernel log
        (:data:`URGENT_FAULT_KINDS`: Xid 79, the Xid, Xid 74) waits for the next round."""
        with self._lock:
            return bool(self.faults.events) or any(
                fault.kind in URGENT_FAULT_KINDS for fault in self.faults.pending
            )

    def nvlinks(self, now: datetime) -> list[dict[str, Any]]:
        """Return one entry per NVLink of every GPU that is not lost, dated ``now`` (none on a
        PCIe-only node)."""
        with self._lock:
            dt_s = 0.0
            if self._links_read_at is not None:
                dt_s = min(MAX_STEP_S, max(0.0, (now - self._links_read_at).total_seconds()))
            self._links_read_at = now
            return self.links.read(self._enumerated(), now, dt_s)

    def topology(self, now: datetime) -> dict[str, Any] | None:
        """Return the GPU part of the topology (GPU devices and GPU↔GPU links)."""
        with self._lock:
            return self.links.topology(self._enumerated(), now) if self.gpus else None

    def gpu_loads(self) -> list[float | None]:
        """Each GPU's utilization now, 0-1, by index (None for a lost GPU), for load-driven host
        traffic."""
        with self._lock:
            absent = self.faults.absent
            return [None if g.lost or g.index in absent else g.util_pct / 100.0 for g in self.gpus]

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
        ``nvlink_down`` (a random NVLink of the GPU goes down for ``duration_s``, for good when
        ``None``: Xid 74, its errors climb, ``topo -m`` shows one link fewer); ``off_bus`` (as
        ``gpu_lost`` but without Xid 79: only the driver's "GPU has fallen off the bus" kernel
        line, a ``gpu_fallen_off_bus`` event); ``nvml_hang`` (an NVML call on the GPU hangs for
        ``duration_s``, for good when ``None``: no samples of it, a collection error each
        round, the GPU still in the inventory); ``xid_repeat`` (Xid ``xid``, 48 when ``None``,
        logged :data:`~agents.simulated.faults.XID_REPEATS` times, one per sample);
        ``lost_at_start`` (the driver no longer enumerates the GPU, as one lost before the agent
        started: out of the inventory and the samples, still counted on PCI, for good —
        ``duration_s`` is ignored; inject it before the agent's first round for a node whose
        first report lacks it).
        ``gpu_index`` ``None`` picks a GPU at random (a busy one for ``thermal_throttle``).

        Raises:
            ValueError: unknown ``kind``, a host fault kind (``ib_port_down``, ``storage_slow``:
                the simulated host source takes those), ``nvlink_down`` on a node without
                NVLink, or ``gpu_index`` not a GPU of this node.
        """
        if kind in HOST_FAULT_KINDS:
            raise ValueError(f"{kind} is a host fault: inject it into the SimulatedHostSource")
        if kind not in GPU_FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(GPU_FAULT_KINDS)}")
        if kind == "nvlink_down" and not self.shape.nvlinks_per_gpu:
            raise ValueError(f"{self.hostname} has no NVLink ({self.shape.key})")
        if gpu_index is not None and not 0 <= gpu_index < len(self.gpus):
            raise ValueError(f"gpu_index {gpu_index} out of range 0..{len(self.gpus) - 1}")
        with self._lock:
            if kind == "agent_stop":
                seconds = duration_s if duration_s is not None else self.rng.uniform(60.0, 120.0)
                self._paused_until = utc_now() + timedelta(seconds=seconds)
                return
            self.faults.pending.append(Pending(kind, gpu_index, duration_s, xid))
