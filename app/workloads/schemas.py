"""Pydantic models of a job's API answer and page: the job, the GPUs it used on each node and
their health events and incidents during its run."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class JobEventOut(BaseModel):
    """An event of a GPU (or of its node, naming no GPU) during the job's run."""

    occurred_at: datetime
    kind: str = Field(description="xid, gpu_lost, gpu_fallen_off_bus, …")
    xid: int | None
    pci_bus_id: str | None
    message: str | None
    test: bool = Field(description="a self-test fault, not a real one")


class JobGpuOut(BaseModel):
    """A GPU the job used, with its events during the job's run (oldest first)."""

    index: int = Field(description="NVML index, as Slurm's IDX numbers the node's GPUs")
    uuid: str | None = Field(description="null: no GPU of that index in Fleetwatch's inventory")
    name: str | None
    events: list[JobEventOut]


class JobIncidentOut(BaseModel):
    """An incident of the node whose events fell within the job's run."""

    id: int
    opened_at: datetime
    last_event_at: datetime
    open: bool
    state: str
    xids: list[int]
    gpu_indexes: list[int]
    job_fatal: bool
    hit: bool = Field(description="it concerns a GPU the job used, or the whole node")
    test: bool


class JobNodeOut(BaseModel):
    """A node the job ran on, as Slurm names it, and what Fleetwatch knows of it."""

    slurm_name: str
    hostname: str | None = Field(description="null: no Fleetwatch node has that Slurm name")
    gpu_indexes: list[int] | None = Field(
        description="the GPUs Slurm allocated the job here; null: none by index (all of them)"
    )
    gpus: list[JobGpuOut]
    node_events: list[JobEventOut] = Field(
        description="events of the node during the run that name no GPU (oldest first)"
    )
    incidents: list[JobIncidentOut] = Field(description="newest first")


class JobOut(BaseModel):
    """A scheduler job (app.workloads): what it is, where it ran and what its GPUs went
    through while it ran."""

    system: Literal["slurm"] = "slurm"
    job_id: str
    name: str
    user: str
    partition: str
    state: str = Field(description="RUNNING, COMPLETED, FAILED …, as the source says")
    started_at: datetime | None = Field(description="null: not started")
    ended_at: datetime | None = Field(description="null: not ended (or not known to)")
    until: datetime | None = Field(
        description="end of the span events were read over: ended_at, else now; null when "
        "the job has not started"
    )
    source: Literal["slurm", "captured"] = Field(
        description="slurm: scontrol was asked now; captured: as incidents captured it "
        "(Slurm no longer knows it, is not managed or could not be asked)"
    )
    captured_at: datetime | None = Field(
        default=None, description="source captured: when the latest capture read it"
    )
    slurm_error: str | None = Field(default=None, description="why Slurm could not be asked")
    nodes: list[JobNodeOut]
