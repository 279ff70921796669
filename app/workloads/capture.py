"""Capturing the jobs an incident hit: soon after an incident opens on a node, each scheduler
Fleetwatch manages is asked once which jobs ran there during the incident: Slurm
(:mod:`app.workloads.slurm_jobs`, the node's ``slurm_name``) and Kubernetes
(:mod:`app.workloads.k8s_pods`, its GPU pods on ``k8s_name``). Each system's answer, or its
error, is one ``workload_capture`` row; a system that fails never loses the other's jobs.

An incident is captured within ``CAPTURE_WITHIN_S`` of its first event: Slurm keeps an ended
job in ``squeue`` for ``MinJobAge`` (300 s by default), so a job the fault killed is still
listed; Kubernetes lists a finished pod until it is garbage-collected. Self-test incidents and
retired nodes are not captured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import and_, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.fleet.models import Node
from app.incidents.models import Incident
from app.remediation import slurm
from app.remediation.service import Backends, k8s_name, slurm_name
from app.workloads import k8s_pods, slurm_jobs
from app.workloads.models import IncidentJob, WorkloadCapture
from app.workloads.records import JobRecord

log = logging.getLogger(__name__)

CAPTURE_WITHIN_S = 600.0

#: Each system's name for a node.
NODE_NAMES: dict[str, Callable[[Node], str]] = {"slurm": slurm_name, "kubernetes": k8s_name}


def overlaps(job: JobRecord, start: datetime, end: datetime) -> bool:
    """Whether the job ran at some moment of ``start`` … ``end`` (a job not started yet, or
    ended before ``start``, did not)."""
    if job.started_at is None or job.started_at > end:
        return False
    return job.ended_at is None or job.ended_at >= start


def _due(session: Session, systems: list[str], now: datetime) -> dict[int, list[tuple[str, str]]]:
    """The incidents due, each with the (system, node name) pairs not captured yet."""
    due: dict[int, list[tuple[str, str]]] = {}
    for system in systems:
        rows = session.execute(
            select(Incident.id, Node)
            .join(Node, Node.id == Incident.node_id)
            .outerjoin(
                WorkloadCapture,
                and_(WorkloadCapture.incident_id == Incident.id, WorkloadCapture.system == system),
            )
            .where(
                WorkloadCapture.incident_id.is_(None),
                Incident.opened_at >= now - timedelta(seconds=CAPTURE_WITHIN_S),
                Incident.test.is_(False),
                Node.retired_at.is_(None),
            )
        ).all()
        for incident_id, node in rows:
            due.setdefault(incident_id, []).append((system, NODE_NAMES[system](node)))
    return dict(sorted(due.items()))


def _read(backends: Backends, system: str, target: str) -> tuple[list[JobRecord], str | None]:
    """``system``'s jobs on its node ``target``, and an error text where it could not be asked
    (then no job); never raises."""
    if system == "slurm" and backends.scontrol is not None:
        if not slurm.valid_node_name(target):
            # squeue -w with a host list or ALL would list other nodes' jobs as this one's.
            return [], f"{target[:80]!r} is not one Slurm node name: fix the slurm_node label"
        return slurm_jobs.jobs_on_node(backends.scontrol, target, timeout_s=backends.timeout_s)
    if system == "kubernetes" and backends.kubeconfig is not None:
        return k8s_pods.jobs_on_node(backends.kubeconfig, target, timeout_s=backends.timeout_s)
    return [], f"{system} is not managed"


def _store(session: Session, incident: Incident, system: str, jobs: list[JobRecord]) -> None:
    """The jobs that ran during ``incident`` as its jobs of ``system`` (flushed later)."""
    end = max(incident.last_event_at, incident.opened_at)
    for job in jobs:
        if not overlaps(job, incident.opened_at, end):
            continue
        session.add(
            IncidentJob(
                incident_id=incident.id,
                system=system,
                job_id=job.job_id[:320],
                user=job.user[:128],
                name=job.name,
                partition=job.partition[:128],
                state=job.state[:32],
                started_at=job.started_at,
                ended_at=job.ended_at,
                gpu_indexes=list(job.gpu_indexes) if job.gpu_indexes is not None else None,
            )
        )


def capture_due(
    factory: sessionmaker[Session], backends: Backends, *, now: datetime | None = None
) -> int:
    """Capture every incident due (see the module) from each managed system that has not
    captured it yet; returns how many captures were stored (one per incident and system).
    The systems are asked outside any transaction; an incident's captures are stored together.
    Does nothing where neither Slurm nor Kubernetes is managed."""
    systems = backends.names
    if not systems:
        return 0
    now = now or utcnow()
    with session_scope(factory) as session:
        due = _due(session, systems, now)
    stored = 0
    for incident_id, targets in due.items():
        answers = [(system, target, *_read(backends, system, target)) for system, target in targets]
        with session_scope(factory) as session:
            incident = session.get(Incident, incident_id)
            if incident is None:
                continue  # pruned meanwhile
            for system, target, jobs, error in answers:
                if session.get(WorkloadCapture, (incident_id, system)) is not None:
                    continue  # captured by another process meanwhile
                session.add(
                    WorkloadCapture(
                        incident_id=incident_id,
                        system=system,
                        captured_at=utcnow(),
                        target=target[:255],
                        error=error,
                    )
                )
                _store(session, incident, system, jobs)
                stored += 1
        for system, target, _jobs, error in answers:
            if error:
                log.warning(
                    "incident %d: the jobs of %s node %s could not be read: %s",
                    incident_id,
                    system,
                    target,
                    error,
                )
    return stored


def job(factory: sessionmaker[Session], backends: Backends) -> None:
    """Scheduler wrapper: errors are logged, never raised."""
    try:
        capture_due(factory, backends)
    except Exception:
        log.exception("workload capture failed")
