"""Pydantic out-models of the pull-mode API."""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel


class SkippedOut(BaseModel):
    """Series of one name left out for one reason (or stored as null, for a DCGM blank)."""

    series: str
    reason: str
    count: int


class WorkloadOut(BaseModel):
    """A Kubernetes pod that dcgm-exporter names on a GPU (or on one of its MIG instances)."""

    gpu_uuid: str
    gpu_index: int
    gpu_instance_id: int | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None


class EndpointOut(BaseModel):
    """One dcgm-exporter endpoint: configured now or not, and its latest scrape's outcome."""

    url: str
    configured: bool
    hostname: str | None = None
    last_scrape_at: AwareDatetime | None = None
    last_success_at: AwareDatetime | None = None
    last_error: str | None = None
    duration_s: float | None = None
    gpu_count: int | None = None
    series_total: int | None = None
    series_stored: int | None = None
    events_raised: int = 0
    skipped: list[SkippedOut] = []
    blanks: list[SkippedOut] = []
    workloads: list[WorkloadOut] = []


class EndpointsOut(BaseModel):
    """Every endpoint, and why the endpoints file could not be read (None: it could, or none
    is configured)."""

    scrape_interval_s: float
    targets_error: str | None = None
    checked_at: datetime
    endpoints: list[EndpointOut]
