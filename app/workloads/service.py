"""An incident's captured jobs, for its page, its API answer and the pages sent to chat; a
job's captures, for the job's page where the scheduler no longer knows it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, exists, select
from sqlalchemy.orm import Session

from app.fleet.models import Node
from app.incidents.models import Incident
from app.workloads.models import IncidentJob, WorkloadCapture


@dataclass(frozen=True)
class JobHit:
    """A job that ran on the incident's node during it; ``hit``: it held one of the
    incident's GPUs, or GPUs not known by index (Slurm's whole node, any Kubernetes pod), or
    the incident concerns the node rather than a GPU."""

    job: IncidentJob
    hit: bool


@dataclass(frozen=True)
class Captured:
    """The captures of an incident's jobs, one per system asked, by system (``[]``: none
    yet), and its jobs."""

    captures: list[WorkloadCapture]
    jobs: list[JobHit]


def jobs_of_incident(session: Session, *, incident_id: int, gpu_indexes: list[int]) -> Captured:
    """The incident's captures and jobs, the jobs it hit first, then by system and job id."""
    captures = session.scalars(
        select(WorkloadCapture)
        .where(WorkloadCapture.incident_id == incident_id)
        .order_by(WorkloadCapture.system)
    ).all()
    rows = session.scalars(select(IncidentJob).where(IncidentJob.incident_id == incident_id))
    hits = []
    for row in rows:
        held = row.gpu_indexes
        hit = not gpu_indexes or held is None or bool(set(held) & set(gpu_indexes))
        hits.append(JobHit(row, hit))
    hits.sort(key=lambda h: (not h.hit, h.job.system, h.job.job_id.zfill(20)))
    return Captured(list(captures), hits)


#: Jobs named in a page; more are counted ("and 3 more").
JOBS_IN_PAGE = 5
#: An incident is a page's when it opened at most this long after the alert fired, or was
#: still gathering events up to this long before.
_NEAR = timedelta(minutes=10)


def _line(job: IncidentJob) -> str:
    """``slurm job 4242 llm-pretrain (alice, RUNNING, GPUs 0,1)``."""
    gpus = "" if job.gpu_indexes is None else ", GPUs " + ",".join(map(str, job.gpu_indexes))
    who = f"{job.user}, " if job.user else ""
    return f"{job.system} job {job.job_id} {job.name} ({who}{job.state}{gpus})"


def jobs_hit_lines(session: Session, *, hostname: str, at: datetime) -> list[str] | None:
    """For a page about node ``hostname`` that fired at ``at``: the jobs hit by the node's
    incident of that moment (the latest, not a self-test, opened up to 10 min after ``at`` and
    with events up to 10 min before it), as short lines, at most :data:`JOBS_IN_PAGE` then
    ``"and N more"``; ``["none"]`` when its capture found none hit. ``None``: no such incident,
    or its jobs not captured (nothing to say)."""
    found = session.execute(
        select(Incident.id, Incident.gpu_indexes)
        .join(Node, Node.id == Incident.node_id)
        .where(
            Node.hostname == hostname,
            Incident.test.is_(False),
            Incident.opened_at <= at + _NEAR,
            Incident.last_event_at >= at - _NEAR,
        )
        .order_by(Incident.opened_at.desc(), Incident.id.desc())
        .limit(1)
    ).first()
    if found is None:
        return None
    captured = jobs_of_incident(session, incident_id=found.id, gpu_indexes=found.gpu_indexes or [])
    if not captured.captures:
        return None
    hit = [h.job for h in captured.jobs if h.hit]
    if not hit:
        return ["none"]
    lines = [_line(job) for job in hit[:JOBS_IN_PAGE]]
    if len(hit) > JOBS_IN_PAGE:
        lines.append(f"and {len(hit) - JOBS_IN_PAGE} more")
    return lines


def awaiting_capture(
    session: Session, hostnames: Collection[str], *, now: datetime, within_s: float
) -> set[str]:
    """The hostnames among ``hostnames`` with an incident (not a self-test) opened within the
    last ``within_s`` whose jobs are not captured yet: a page about them waits for the capture
    (:mod:`app.notify.worker`), so it can say which jobs were hit."""
    if not hostnames or within_s <= 0:
        return set()
    captured = exists().where(WorkloadCapture.incident_id == Incident.id)
    rows = session.scalars(
        select(Node.hostname)
        .join(Incident, Incident.node_id == Node.id)
        .where(
            Node.hostname.in_(set(hostnames)),
            Incident.test.is_(False),
            Incident.opened_at >= now - timedelta(seconds=within_s),
            ~captured,
        )
    )
    return set(rows)


@dataclass(frozen=True)
class JobCapture:
    """A job as one incident's capture saw it: ``node`` is the Slurm node it was read on."""

    job: IncidentJob
    node: str
    captured_at: datetime


def captures_of_job(session: Session, *, system: str, job_id: str) -> list[JobCapture]:
    """Every capture of job ``job_id`` of ``system`` (``slurm``), one per incident it ran
    during, oldest capture first; ``[]`` where none saw it."""
    rows = session.execute(
        select(IncidentJob, WorkloadCapture.target, WorkloadCapture.captured_at)
        .join(
            WorkloadCapture,
            and_(
                WorkloadCapture.incident_id == IncidentJob.incident_id,
                WorkloadCapture.system == IncidentJob.system,
            ),
        )
        .where(IncidentJob.system == system, IncidentJob.job_id == job_id)
        .order_by(WorkloadCapture.captured_at, IncidentJob.id)
    )
    return [JobCapture(job, node, at) for job, node, at in rows]
