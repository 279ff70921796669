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
    """A scheduler job that ran on the incident's node during it (app.workloads)."""

    system: str = Field(description="slurm")
    job_id: str
    user: str
    name: str
    partition: str
    state: str = Field(description="as the scheduler said when captured: RUNNING, FAILED …")
    started_at: datetime | None
    ended_at: datetime | None
    gpu_indexes: list[int] | None = Field(
        description="the node's GPUs allocated to it; null: none by index (the whole node)"
    )
    hit: bool = Field(description="it held an affected GPU, or the whole node")


class IncidentDetailOut(IncidentOut):
    """An incident with its events, the alerts it caused, the topology changes of its node
    within its span and the jobs that ran on the node during it."""

    events: list[IncidentEventOut]
    alerts: list[IncidentAlertOut]
    topology_changes: list[IncidentTopologyOut] = Field(default_factory=list)
    jobs: list[IncidentJobOut] = Field(default_factory=list)
    jobs_captured_at: datetime | None = Field(
        default=None, description="when the scheduler was asked; null: not (yet)"
    )
    jobs_error: str | None = Field(default=None, description="why the jobs could not be read")
