"""An incident's captured jobs, for its page, its API answer and its chat message."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.workloads.models import IncidentJob, WorkloadCapture


@dataclass(frozen=True)
class JobHit:
    """A job that ran on the incident's node during it; ``hit``: it held one of the
    incident's GPUs, or the whole node (no GPU allocation known), or the incident concerns the
    node rather than a GPU."""

    job: IncidentJob
    hit: bool


@dataclass(frozen=True)
class Captured:
    """The capture of an incident's jobs: ``None`` fields while not captured yet."""

    capture: WorkloadCapture | None
    jobs: list[JobHit]


def jobs_of_incident(session: Session, *, incident_id: int, gpu_indexes: list[int]) -> Captured:
    """The incident's jobs, the ones it hit first, then by job id."""
    capture = session.get(WorkloadCapture, incident_id)
    rows = session.scalars(select(IncidentJob).where(IncidentJob.incident_id == incident_id))
    hits = []
    for row in rows:
        held = row.gpu_indexes
        hit = not gpu_indexes or held is None or bool(set(held) & set(gpu_indexes))
        hits.append(JobHit(row, hit))
    hits.sort(key=lambda h: (not h.hit, h.job.job_id.zfill(20)))
    return Captured(capture, hits)
