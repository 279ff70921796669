"""What the simulated GPU faults do: Xid events (once or repeated), a GPU falling off the bus
(with Xid 79 or only the driver's kernel line) and coming back after a reset, failed cooling,
an NVLink going down, an NVML call that hangs on one GPU; and when each of them ends.

Used by :class:`agents.simulated.collector.SimulatedCollector`, which holds the lock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agents.payload import EventDict, make_event
from agents.simulated.faults import (
    APP_FATAL_XIDS,
    NVML_HANG_ERROR,
    RANDOM_XIDS,
    XID_REPEAT_DEFAULT,
    XID_REPEATS,
    fallen_off_bus_line,
    xid_message,
)
from agents.simulated.gpu import SimGpu
from agents.simulated.links import SimLinks
from agents.simulated.shapes import NodeShape
from agents.simulated.workload import Workload

DEFAULT_THERMAL_S = 180.0


@dataclass
class Pending:
    """A fault injected but not applied yet (applied at the next sample)."""

    kind: str
    gpu_index: int | None
    duration_s: float | None
    xid: int | None


@dataclass
class GpuFaults:
    """The GPU faults in force on one simulated node, and the events they produced since the
    last drain (``events``)."""

    shape: NodeShape
    gpus: list[SimGpu]
    workload: Workload
    links: SimLinks
    rng: random.Random
    pending: list[Pending] = field(default_factory=list)
    events: list[EventDict] = field(default_factory=list)
    lost_until: dict[int, datetime | None] = field(default_factory=dict)
    lost_reason: dict[int, str] = field(default_factory=dict)
    cooling_until: dict[int, datetime] = field(default_factory=dict)
    #: GPU index → when its hung NVML call returns (None: never).
    hung_until: dict[int, datetime | None] = field(default_factory=dict)
    #: GPU index → (Xid, occurrences still to log) of an ``xid_repeat``.
    repeats: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: GPU indexes the driver does not enumerate (``lost_at_start``).
    absent: set[int] = field(default_factory=set)

    def apply_pending(self, now: datetime) -> None:
        """Log the next occurrence of each repeating Xid, then apply every pending fault at
        ``now``."""
        for index, (code, left) in list(self.repeats.items()):
            self._xid(self.gpus[index], code, now)
            if left > 1:
                self.repeats[index] = (code, left - 1)
            else:
                del self.repeats[index]
        for fault in self.pending:
            self.apply(fault, now)
        self.pending.clear()

    def hung(self, gpu: SimGpu) -> bool:
        """Whether an NVML call on ``gpu`` hangs now (no sample of it)."""
        return gpu.index in self.hung_until

    def hang_errors(self) -> list[dict[str, str]]:
        """One collection error per hung GPU, as the NVML collector reports each round."""
        return [
            {"source": "nvml", "message": NVML_HANG_ERROR.format(index=i, uuid=self.gpus[i].uuid)}
            for i in sorted(self.hung_until)
        ]

    def apply(self, fault: Pending, now: datetime) -> None:
        """Make ``fault`` take effect at ``now`` on its GPU (a random one when unnamed)."""
        if not self.gpus:
            return
        gpu = self._pick_gpu(fault)
        if fault.kind == "xid":
            code = fault.xid if fault.xid is not None else self.rng.choice(RANDOM_XIDS)
            if code != 79:
                self._xid(gpu, code, now)
                return
        if fault.kind == "xid_repeat":
            code = fault.xid if fault.xid is not None else XID_REPEAT_DEFAULT
            self._xid(gpu, code, now)
            if XID_REPEATS > 1:
                self.repeats[gpu.index] = (code, XID_REPEATS - 1)
        elif fault.kind == "lost_at_start":
            self.absent.add(gpu.index)
            self.workload.kill_job_on(gpu.index)
        elif fault.kind == "nvml_hang":
            until = None if fault.duration_s is None else now + timedelta(seconds=fault.duration_s)
            self.hung_until[gpu.index] = until
        elif fault.kind == "off_bus":
            self._lose(gpu, now, fault.duration_s, xid=False)
        elif fault.kind in ("gpu_lost", "xid"):
            self._lose(gpu, now, fault.duration_s)
        elif fault.kind == "nvlink_down":
            self._link_down(gpu, now, fault.duration_s)
        elif fault.kind == "thermal_throttle":
            seconds = fault.duration_s if fault.duration_s is not None else DEFAULT_THERMAL_S
            gpu.cooling_failed = True
            self.cooling_until[gpu.index] = now + timedelta(seconds=seconds)

    def _pick_gpu(self, fault: Pending) -> SimGpu:
        if fault.gpu_index is not None:
            return self.gpus[fault.gpu_index]
        candidates = [g for g in self.gpus if not g.lost] or self.gpus
        if fault.kind == "thermal_throttle":
            busy = [g for g in candidates if self.workload.job_on(g.index) is not None]
            candidates = busy or candidates
        return self.rng.choice(candidates)

    def _xid(self, gpu: SimGpu, code: int, now: datetime) -> None:
        job = self.workload.job_on(gpu.index)
        process = (job.pid_on(gpu.index), job.process_name) if job is not None else None
        message = xid_message(
            code, gpu.pci_bus_id, gpu_index=gpu.index, rng=self.rng, process=process
        )
        self.events.append(
            make_event(
                "xid", now, gpu_uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, xid=code, message=message
            )
        )
        if code == 48:
            gpu.record_uncorrected_ecc()
        if code in APP_FATAL_XIDS:
            self.workload.kill_job_on(gpu.index)

    def _lose(
        self, gpu: SimGpu, now: datetime, duration_s: float | None, *, xid: bool = True
    ) -> None:
        """``gpu`` falls off the bus: with ``xid``, Xid 79 then NVML's lost event; without,
        only the driver's "fallen off the bus" kernel line (and NVML's lost state)."""
        if gpu.lost:
            return
        if xid:
            self._xid(gpu, 79, now)
        self.workload.kill_job_on(gpu.index)
        gpu.lost = True
        reason = "NVML_ERROR_GPU_IS_LOST: GPU has fallen off the bus" + (" (Xid 79)" if xid else "")
        self.lost_reason[gpu.index] = reason
        self.lost_until[gpu.index] = (
            None if duration_s is None else now + timedelta(seconds=duration_s)
        )
        kind, message = "gpu_lost", f"GPU {gpu.pci_bus_id} is lost: {reason}"
        if not xid:
            kind, message = "gpu_fallen_off_bus", fallen_off_bus_line(gpu.pci_bus_id)
        self.events.append(
            make_event(kind, now, gpu_uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, message=message)
        )

    def thermal_event(self, gpu: SimGpu, now: datetime) -> None:
        self.events.append(
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

    def _link_down(self, gpu: SimGpu, now: datetime, duration_s: float | None) -> None:
        until = None if duration_s is None else now + timedelta(seconds=duration_s)
        try:
            link = self.links.take_down(gpu.index, None, until)
        except ValueError:
            return  # every link of this GPU is down already
        gpu.nvlink_up_ratio = self.links.up_count(gpu.index) / self.shape.nvlinks_per_gpu
        job = self.workload.job_on(gpu.index)
        process = (job.pid_on(gpu.index), job.process_name) if job is not None else None
        message = xid_message(
            74, gpu.pci_bus_id, gpu_index=gpu.index, rng=self.rng, process=process, link=link
        )
        self.events.append(
            make_event(
                "xid", now, gpu_uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id, xid=74, message=message
            )
        )

    def expire(self, now: datetime) -> None:
        """End the faults whose duration is over by ``now``: GPUs reset, links retrained,
        cooling restored."""
        for index, until in list(self.lost_until.items()):
            if until is not None and until <= now:
                self.gpus[index].reset()
                del self.lost_until[index]
                self.lost_reason.pop(index, None)
        for index, _link in self.links.expire(now):
            self.gpus[index].nvlink_up_ratio = (
                self.links.up_count(index) / self.shape.nvlinks_per_gpu
            )
        for index, until in list(self.cooling_until.items()):
            if until <= now:
                self.gpus[index].cooling_failed = False
                del self.cooling_until[index]
        for index, hang_until in list(self.hung_until.items()):
            if hang_until is not None and hang_until <= now:
                del self.hung_until[index]
