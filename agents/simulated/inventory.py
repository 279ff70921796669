"""The simulated node's GPU inventory (``gpus[]``): identity and state, and the agent 0.2
details: why metrics are null (``unavailable``) and the compute processes of each GPU's job."""

from __future__ import annotations

import random
from typing import Any, cast

from agents.payload import GpuInfo
from agents.simulated.gpu import SimGpu
from agents.simulated.shapes import NodeShape
from agents.simulated.workload import Workload

#: Owners of the simulated jobs' processes.
USERS = ("svc-train", "alice", "bob", "mlops", "svc-infer")
CONTEXT_BYTES = 512 * 1024 * 1024  # CUDA context of a process, counted in its memory


def gpu_inventory(
    shape: NodeShape, gpus: list[SimGpu], workload: Workload, lost_reason: dict[int, str]
) -> list[GpuInfo]:
    """One inventory entry per GPU: ``lost`` with its reason while a ``gpu_lost`` fault holds,
    the metrics it never reports with NVML's reason, and its job's process (none when idle or
    lost; MIG is disabled on simulated GPUs)."""
    entries = []
    for gpu in gpus:
        entry: dict[str, Any] = dict(
            GpuInfo(
                uuid=gpu.uuid,
                index=gpu.index,
                name=shape.gpu_name,
                pci_bus_id=gpu.pci_bus_id,
                mem_total_bytes=shape.mem_total_bytes,
                mig_mode="disabled",
                state="lost" if gpu.lost else "ok",
                state_reason=lost_reason.get(gpu.index) if gpu.lost else None,
            )
        )
        entry["unavailable"] = gpu.unavailable()
        entry["mig_instances"] = None
        entry["processes"] = [] if gpu.lost else processes(gpu, workload)
        # GpuInfo does not declare the agent 0.2 keys yet; the payload copies them as they are.
        entries.append(cast(GpuInfo, entry))
    return entries


def processes(gpu: SimGpu, workload: Workload) -> list[dict[str, Any]]:
    """The compute process of the job on ``gpu`` (one per GPU: a rank of the job), or none."""
    job = workload.job_on(gpu.index)
    if job is None:
        return []
    user = USERS[random.Random(job.pid).randrange(len(USERS))]
    used = int(gpu.mem_used_bytes) // (1024 * 1024) * 1024 * 1024
    return [
        {
            "pid": job.pid_on(gpu.index),
            "used_memory_bytes": max(used, CONTEXT_BYTES),
            "name": job.process_name,
            "user": user,
        }
    ]
