"""Pydantic models of the incidents API."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class IncidentOut(BaseModel):
    """One incident: a node's related fault events (app.incidents)."""

    id: int
    hostname: str
    open: bool = Field(description="an event came within the quiet period of now")
    opened_at: datetime = Field(description="its first event")
    last_event_at: datetime
    closes_at: datetime = Field(description="last_event_at + the quiet period")
    event_count: int
    gpu_indexes: list[int]
    xids: list[int]
    kinds: list[str] = Field(description="event kinds: xid, gpu_lost, gpu_fallen_off_bus")
    state: str = Field(description="the worst health state its events cause")
    job_fatal: bool = Field(description="an event of it ends the jobs on its GPU")
    action_code: str = Field(description="its strongest suggested repair (app.health.actions)")
    action_text: str
    test: bool = Field(default=False, description="a self-test fault's incident, not a real one")


class IncidentEventOut(BaseModel):
    """One event of an incident."""

    occurred_at: datetime
    kind: str
    xid: int | None
    gpu_index: int | None
    pci_bus_id: str | None
    message: str | None


class IncidentAlertOut(BaseModel):
    """An alert the incident caused: pending or firing on its node within its span."""

    id: int
    rule: str
    severity: str
    state: str = Field(description="its state now")
    summary: str
    started_at: datetime = Field(description="when it turned pending or firing")


class IncidentTopologyOut(BaseModel):
    """A topology change of the node during the incident (a GPU fell off the bus: one GPU
    fewer, its links gone; back after a reset)."""

    collected_at: datetime
    gpus: int = Field(description="GPUs in the new topology")
    links: int = Field(description="device pairs with a link (NV#, PIX …) in it")
    partial: bool = Field(description="a GPU could not be read when it was taken")


class IncidentJobOut(BaseModel):
    """A scheduler job that ran on the incident's node during it (app.workloads): a Slurm job,
    or a Kubernetes pod that asks for GPUs."""

    system: str = Field(description="slurm or kubernetes")
    job_id: str = Field(description="Slurm's job id; a pod's <namespace>/<name>")
    user: str = Field(description="Slurm's user; a pod's service account, else its namespace")
    name: str = Field(description="Slurm's job name; a pod's owner <kind>/<name>, else its name")
    partition: str = Field(description="Slurm's partition; a pod's namespace")
    state: str = Field(
        description="as the scheduler said when captured: RUNNING, FAILED …; a pod's phase "
        "(Running …) or the reason a container ended (OOMKilled, Error …)"
    )
    started_at: datetime | None
    ended_at: datetime | None
    gpu_indexes: list[int] | None = Field(
        description="the node's GPUs allocated to it; null: not known by index (a Slurm job "
        "without GRES indexes holds the whole node; Kubernetes never says which)"
    )
    hit: bool = Field(description="it held an affected GPU, or GPUs not known by index")


class IncidentJobCaptureOut(BaseModel):
    """One system's capture of the node's jobs for the incident."""

    system: str = Field(description="slurm or kubernetes")
    target: str = Field(description="the node's name in that system")
    captured_at: datetime
    error: str | None = Field(description="why its jobs could not be read; null: they were")


class IncidentDetailOut(IncidentOut):
    """An incident with its events, the alerts it caused, the topology changes of its node
    within its span and the jobs that ran on the node during it."""

    events: list[IncidentEventOut]
    alerts: list[IncidentAlertOut]
    topology_changes: list[IncidentTopologyOut] = Field(default_factory=list)
    jobs: list[IncidentJobOut] = Field(default_factory=list)
    jobs_captures: list[IncidentJobCaptureOut] = Field(
        default_factory=list, description="each system asked for the node's jobs"
    )
    jobs_captured_at: datetime | None = Field(
        default=None,
        description="when the first system was asked (each in jobs_captures); null: none (yet)",
    )
    jobs_error: str | None = Field(
        default=None,
        description="why jobs could not be read: each failed system's '<system>: <error>', "
        "joined by '; '; null: none failed",
    )
