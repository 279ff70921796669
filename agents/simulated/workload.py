"""The simulated node's load: a day/night cycle plus jobs that start, run for minutes and end.

Deterministic for a given ``random.Random`` and sequence of ``now`` values.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

_PROCESS_NAMES = ("python3", "pt_main_thread", "python3.10", "torchrun", "vllm")


@dataclass
class Job:
    """A job holding some GPUs of the node.

    Attributes:
        gpu_indices: the GPUs it occupies.
        ends_at: POSIX time (s) at which it finishes.
        util_pct: its steady GPU utilization.
        mem_fraction: share of the usable memory it allocates, 0-1.
        mem_intensity: ``util_mem_pct`` per ``util_gpu_pct``.
        comm_share: share of the NVLink peak it uses (multi-GPU jobs only).
        pcie_share: share of the PCIe peak it uses.
        enc_pct: encoder utilization (video jobs), usually 0.
        pid, process_name: the first rank's process (NVRM names a rank in an Xid line).
        dip_until: POSIX time until which utilization dips (checkpoint, data loading).
    """

    gpu_indices: tuple[int, ...]
    ends_at: float
    util_pct: float
    mem_fraction: float
    mem_intensity: float
    comm_share: float
    pcie_share: float
    enc_pct: float
    pid: int
    process_name: str
    dip_until: float = 0.0

    def pid_on(self, gpu_index: int) -> int:
        """The PID of the job's process on ``gpu_index``: one rank per GPU, consecutive PIDs."""
        return self.pid + self.gpu_indices.index(gpu_index)


def diurnal_factor(posix_s: float, phase_h: float = 0.0) -> float:
    """Return the wanted share of busy GPUs at ``posix_s``: a 24 h sinusoid of UTC wall time,
    0.2 at 02:00 and 0.9 at 14:00 (shifted by ``phase_h`` hours)."""
    hour = (posix_s / 3600.0 + phase_h) % 24.0
    return 0.55 + 0.35 * math.sin(2 * math.pi * (hour - 8.0) / 24.0)


@dataclass
class Workload:
    """The jobs of one node and the rule that starts new ones.

    Attributes:
        gpu_count: GPUs of the node.
        rng: the node's random source.
        job_sizes: GPU counts a job may ask for (1, 2, 4, 8 on an HGX node).
        video: whether some jobs use the encoder (PCIe inference/transcode nodes).
        phase_h: this node's shift of the day cycle, so nodes do not move in lockstep.
    """

    gpu_count: int
    rng: random.Random
    job_sizes: tuple[int, ...]
    video: bool = False
    phase_h: float = 0.0
    jobs: list[Job] = field(default_factory=list)
    _started: bool = False

    def job_on(self, gpu_index: int) -> Job | None:
        """Return the job occupying ``gpu_index``, or ``None`` when it is idle."""
        for job in self.jobs:
            if gpu_index in job.gpu_indices:
                return job
        return None

    def kill_job_on(self, gpu_index: int) -> None:
        """End at once the job occupying ``gpu_index`` (its application died), if any."""
        self.jobs = [j for j in self.jobs if gpu_index not in j.gpu_indices]

    def step(self, now_s: float, dt_s: float, unavailable: frozenset[int] = frozenset()) -> None:
        """Advance to POSIX time ``now_s`` (``dt_s`` after the last step): end finished jobs,
        start new ones towards the day cycle's share of busy GPUs, avoiding ``unavailable``.

        The first step fills the node straight to that share, so a fresh simulator shows load.
        """
        self.jobs = [j for j in self.jobs if j.ends_at > now_s]
        for job in self.jobs:
            if job.dip_until < now_s and self.rng.random() < dt_s / 300.0:
                job.dip_until = now_s + self.rng.uniform(10.0, 30.0)
        target_busy = diurnal_factor(now_s, self.phase_h) * self.gpu_count
        first = not self._started
        self._started = True
        for _ in range(self.gpu_count):
            busy = sum(len(j.gpu_indices) for j in self.jobs)
            if busy >= target_busy:
                return
            if not first and self.rng.random() >= min(1.0, dt_s / 45.0):
                return
            if not self._start_job(now_s, unavailable, already_running=first):
                return

    def _start_job(self, now_s: float, unavailable: frozenset[int], already_running: bool) -> bool:
        busy = {i for j in self.jobs for i in j.gpu_indices} | unavailable
        free = [i for i in range(self.gpu_count) if i not in busy]
        sizes = [s for s in self.job_sizes if s <= len(free)]
        if not sizes:
            return False
        size = self.rng.choice(sizes)
        # Prefer an aligned block (GPUs 0-3, 4-7 …), as schedulers do; else any free GPUs.
        blocks = [
            tuple(range(start, start + size))
            for start in range(0, self.gpu_count - size + 1, size)
            if all(i in free for i in range(start, start + size))
        ]
        gpus = self.rng.choice(blocks) if blocks else tuple(free[:size])
        duration = min(3600.0, max(120.0, self.rng.expovariate(1 / 900.0)))
        if already_running:
            duration *= self.rng.random()
        video = self.video and self.rng.random() < 0.3
        self.jobs.append(
            Job(
                gpu_indices=gpus,
                ends_at=now_s + max(60.0, duration),
                util_pct=self.rng.uniform(45.0, 70.0) if video else self.rng.uniform(85.0, 100.0),
                mem_fraction=self.rng.uniform(0.3, 0.95),
                mem_intensity=self.rng.uniform(0.1, 0.6),
                comm_share=self.rng.uniform(0.05, 0.35) if size > 1 else 0.0,
                pcie_share=self.rng.uniform(0.01, 0.08),
                enc_pct=self.rng.uniform(30.0, 70.0) if video else 0.0,
                pid=self.rng.randrange(1000, 4_000_000),
                process_name="ffmpeg" if video else self.rng.choice(_PROCESS_NAMES),
            )
        )
        return True
