"""One job as a scheduler reports it, whichever the scheduler: what
:mod:`app.workloads.slurm_jobs` and :mod:`app.workloads.k8s_pods` return and
:mod:`app.workloads.capture` stores."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class JobRecord:
    """One job on a node, times UTC (``None``: not known, or not started / not ended).

    ``gpu_indexes``: the node's GPUs allocated to it, or ``None`` where the scheduler does not
    say which (Slurm without GRES by index: the whole node; Kubernetes never says).
    """

    job_id: str
    user: str
    name: str
    partition: str
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    gpu_indexes: tuple[int, ...] | None = None
