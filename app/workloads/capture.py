"""Capturing the jobs an incident hit: soon after an incident opens on a node, its scheduler is
asked once which jobs ran there during the incident (:mod:`app.workloads.slurm_jobs`).

An incident is captured within ``CAPTURE_WITHIN_S`` of its first event: Slurm keeps an ended
job in ``squeue`` for ``MinJobAge`` (300 s by default), so a job the fault killed is still
listed. Self-test incidents and retired nodes are not captured.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.fleet.models import Node
from app.incidents.models import Incident
from app.remediation.service import Backends, slurm_name
from app.workloads import slurm_jobs
from app.workloads.models import IncidentJob, WorkloadCapture
from app.workloads.records import JobRecord

log = logging.getLogger(__name__)

CAPTURE_WITHIN_S = 600.0


def overlaps(job: JobRecord, start: datetime, end: datetime) -> bool:
    """Whether the job ran at some moment of ``start`` … ``end`` (a job not started yet, or
    ended before ``start``, did not)."""
    if job.started_at is None or job.started_at > end:
        return False
    return job.ended_at is None or job.ended_at >= start


def capture_due(
    factory: sessionmaker[Session], backends: Backends, *, now: datetime | None = None
) -> int:
    """Capture every incident due (see the module); returns how many were captured. Does
    nothing where Slurm is not managed."""
    if backends.scontrol is None:
        return 0
    now = now or utcnow()
    with session_scope(factory) as session:
        due = session.execute(
            select(Incident.id, Node)
            .join(Node, Node.id == Incident.node_id)
            .outerjoin(WorkloadCapture, WorkloadCapture.incident_id == Incident.id)
            .where(
                WorkloadCapture.incident_id.is_(None),
                Incident.opened_at >= now - timedelta(seconds=CAPTURE_WITHIN_S),
                Incident.test.is_(False),
                Node.retired_at.is_(None),
            )
            .order_by(Incident.id)
        ).all()
        targets = [(incident_id, slurm_name(node)) for incident_id, node in due]
    for incident_id, target in targets:
        jobs, error = slurm_jobs.jobs_on_node(
            backends.scontrol, target, timeout_s=backends.timeout_s
        )
        with session_scope(factory) as session:
            incident = session.get(Incident, incident_id)
            if incident is None or session.get(WorkloadCapture, incident_id) is not None:
                continue  # pruned, or captured by another process meanwhile
            session.add(
                WorkloadCapture(
                    incident_id=incident_id,
                    captured_at=utcnow(),
                    system="slurm",
                    target=target,
                    error=error,
                )
            )
            for job in jobs:
                if overlaps(
                    job, incident.opened_at, max(incident.last_event_at, incident.opened_at)
                ):
                    session.add(
                        IncidentJob(
                            incident_id=incident_id,
                            system="slurm",
                            job_id=job.job_id[:64],
                            user=job.user[:128],
                            name=job.name,
                            partition=job.partition[:128],
                            state=job.state[:32],
                            started_at=job.started_at,
                            ended_at=job.ended_at,
                            gpu_indexes=list(job.gpu_indexes)
                            if job.gpu_indexes is not None
                            else None,
                        )
                    )
        if error:
            log.warning(
                "incident %d: the jobs of Slurm node %s could not be read: %s",
                incident_id,
                target,
                error,
            )
    return len(targets)


def job(factory: sessionmaker[Session], backends: Backends) -> None:
    """Scheduler wrapper: errors are logged, never raised."""
    try:
        capture_due(factory, backends)
    except Exception:
        log.exception("workload capture failed")
