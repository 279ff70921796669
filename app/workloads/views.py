"""A job as its API answer and page show it: read from Slurm now, else from what incidents
captured of it; the GPUs it used on each node, their events and the node's incidents during
its run (start → end, or now while it runs or where its end is not known)."""

from __future__ import annotations

import re
from datetime import datetime

from sqlalchemy.orm import Session

from app.errors import NotFound, Unavailable, Unprocessable
from app.events import service as events_service
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.incidents import service as incidents_service
from app.remediation import service as remediation
from app.remediation.service import Backends
from app.workloads import service as workloads
from app.workloads import slurm_jobs
from app.workloads.records import JobRecord
from app.workloads.schemas import (
    JobEventOut,
    JobGpuOut,
    JobIncidentOut,
    JobNodeOut,
    JobOut,
)
from app.workloads.slurm_jobs import JobDetail, JobNode

#: Longest a page waits for scontrol: against a controller that is down it retries for about
#: 20 s before it gives up, and the captured data is worth showing sooner.
LOOKUP_TIMEOUT_S = 10.0
#: Events shown per node (the newest), and incidents per node.
EVENTS_SHOWN = 500
INCIDENTS_SHOWN = 50


def check_job_id(job_id: str) -> str:
    """``job_id`` if it is a Slurm job id (:data:`~app.workloads.slurm_jobs.JOB_ID_PATTERN`).

    Raises:
        Unprocessable: it is not; the message names ``job_id``.
    """
    if re.fullmatch(slurm_jobs.JOB_ID_PATTERN, job_id) is None:
        raise Unprocessable(
            f"job_id: {job_id[:40]!r} is not a Slurm job id (digits, optionally _N for an "
            "array task or +N for a heterogeneous job's component)"
        )
    return job_id


def _from_captures(captures: list[workloads.JobCapture]) -> JobDetail:
    """The job as its latest capture saw it, on every node a capture saw it on."""
    latest = captures[-1].job
    held = {c.node: c.job.gpu_indexes for c in captures}
    job = JobRecord(
        job_id=latest.job_id,
        user=latest.user,
        name=latest.name,
        partition=latest.partition,
        state=latest.state,
        started_at=latest.started_at,
        # Captures made before ENDED_STATES hold a running job's time limit as its end.
        ended_at=slurm_jobs.ended_at(latest.state, latest.ended_at),
    )
    nodes = (JobNode(n, tuple(g) if g is not None else None) for n, g in held.items())
    return JobDetail(job, tuple(nodes))


def find_job(
    session: Session, *, job_id: str, backends: Backends
) -> tuple[JobDetail, datetime | None, str | None]:
    """The job from Slurm (captured-at ``None``), else from its captures (when the latest
    was made), and why Slurm could not be asked (``None``: it was, or it is not managed).

    Raises:
        NotFound: neither Slurm nor a capture knows it.
        Unavailable: Slurm could not be asked and no capture knows it.
    """
    error = None
    if backends.scontrol is not None:
        timeout_s = min(backends.timeout_s, LOOKUP_TIMEOUT_S)
        lookup = slurm_jobs.show_job(backends.scontrol, job_id, timeout_s=timeout_s)
        if lookup.detail is not None:
            return lookup.detail, None, None
        error = lookup.error
    captures = workloads.captures_of_job(session, system="slurm", job_id=job_id)
    if captures:
        return _from_captures(captures), captures[-1].captured_at, error
    if error is not None:
        raise Unavailable(
            f"Slurm job {job_id}: Slurm could not be asked ({error}) and no incident "
            "captured the job"
        )
    if backends.scontrol is not None:
        raise NotFound(
            f"no Slurm job {job_id}: Slurm does not know it (a job is forgotten MinJobAge "
            "after it ends) and no incident captured it"
        )
    raise NotFound(
        f"no Slurm job {job_id} captured by an incident (Slurm is not managed here: "
        "FLEETWATCH_SLURM_SCONTROL)"
    )


def _gpus_used(
    node: Node, wanted: tuple[int, ...] | None, start: datetime, until: datetime
) -> list[tuple[int, Gpu | None]]:
    """(index, GPU row or ``None`` where the inventory has none) of each GPU index the job
    held (all the node's where Slurm names none): the rows of that index seen during the run
    (two where the GPU was swapped meanwhile), else the one seen last."""
    indexes = wanted if wanted is not None else sorted({g.index for g in node.gpus})
    used: list[tuple[int, Gpu | None]] = []
    for index in indexes:
        rows = sorted((g for g in node.gpus if g.index == index), key=lambda g: g.last_seen_at)
        during = [g for g in rows if g.first_seen_at <= until and g.last_seen_at >= start]
        used += [(index, g) for g in during or rows[-1:]] or [(index, None)]
    return used


def _listed(indexes: tuple[int, ...] | None) -> list[int] | None:
    return list(indexes) if indexes is not None else None


def _event_out(event: NodeEvent) -> JobEventOut:
    return JobEventOut(
        occurred_at=event.occurred_at,
        kind=event.kind,
        xid=event.xid,
        pci_bus_id=event.pci_bus_id,
        message=event.message,
        test=event.test,
    )


def _node_out(
    session: Session,
    *,
    node: Node,
    held: JobNode,
    start: datetime,
    until: datetime,
    quiet_s: float,
    now: datetime,
) -> JobNodeOut:
    used = _gpus_used(node, held.gpu_indexes, start, until)
    mine = {g.id: g for _, g in used if g is not None}
    # An event tied to no GPU but naming a PCI address belongs to the GPU there (kernel Xid
    # lines name only the address), as on the GPU page; this job's GPU where two share it.
    by_bus = {g.pci_bus_id.lower(): g for g in [*node.gpus, *mine.values()] if g.pci_bus_id}
    events = events_service.list_node_events_between(
        session, node_id=node.id, start=start, end=until, gpu_ids=mine, limit=EVENTS_SHOWN
    )
    of_gpu: dict[int, list[JobEventOut]] = {gpu_id: [] for gpu_id in mine}
    node_events = []
    for event in events:
        gpu = by_bus.get((event.pci_bus_id or "").lower()) if event.gpu_id is None else None
        gpu_id = event.gpu_id if event.gpu_id is not None else (gpu.id if gpu else None)
        if gpu_id is None:
            node_events.append(_event_out(event))
        elif gpu_id in of_gpu:
            of_gpu[gpu_id].append(_event_out(event))
    rows = incidents_service.list_incidents(
        session,
        quiet_s=quiet_s,
        now=now,
        hostname=node.hostname,
        since=start,
        until=until,
        limit=INCIDENTS_SHOWN,
    )
    held_set = set(held.gpu_indexes or ())
    return JobNodeOut(
        slurm_name=held.name,
        hostname=node.hostname,
        gpu_indexes=_listed(held.gpu_indexes),
        gpus=[
            JobGpuOut(
                index=index,
                uuid=g.uuid if g else None,
                name=g.name if g else None,
                events=of_gpu[g.id] if g else [],
            )
            for index, g in used
        ],
        node_events=node_events,
        incidents=[
            JobIncidentOut(
                id=r.incident.id,
                opened_at=r.incident.opened_at,
                last_event_at=r.incident.last_event_at,
                open=r.open,
                state=r.incident.state,
                xids=list(r.incident.xids),
                gpu_indexes=list(r.incident.gpu_indexes),
                job_fatal=r.incident.job_fatal,
                hit=held.gpu_indexes is None
                or not r.incident.gpu_indexes
                or bool(held_set & set(r.incident.gpu_indexes)),
                test=r.incident.test,
            )
            for r in rows
        ],
    )


def job_detail(
    session: Session, *, job_id: str, backends: Backends, quiet_s: float, now: datetime
) -> JobOut:
    """Slurm job ``job_id`` with each node it ran on, the GPUs it used there and their events
    and the node's incidents during its run.

    Raises:
        Unprocessable: ``job_id`` is not a Slurm job id.
        NotFound: neither Slurm nor an incident's capture knows the job.
        Unavailable: Slurm could not be asked and no capture knows the job.
    """
    detail, captured_at, error = find_job(session, job_id=check_job_id(job_id), backends=backends)
    job = detail.job
    start = job.started_at
    until = (job.ended_at or now) if start is not None else None
    fleet = remediation.nodes_by_slurm_name(session, names=[n.name for n in detail.nodes])
    nodes = []
    for held in detail.nodes:
        node = fleet.get(held.name)
        if node is not None and start is not None and until is not None:
            nodes.append(
                _node_out(
                    session,
                    node=node,
                    held=held,
                    start=start,
                    until=until,
                    quiet_s=quiet_s,
                    now=now,
                )
            )
        else:  # no Fleetwatch node of that name, or the job has not started: nothing to read
            nodes.append(
                JobNodeOut(
                    slurm_name=held.name,
                    hostname=node.hostname if node else None,
                    gpu_indexes=_listed(held.gpu_indexes),
                    gpus=[],
                    node_events=[],
                    incidents=[],
                )
            )
    return JobOut(
        job_id=job_id,
        name=job.name,
        user=job.user,
        partition=job.partition,
        state=job.state,
        started_at=job.started_at,
        ended_at=job.ended_at,
        until=until,
        source="slurm" if captured_at is None else "captured",
        captured_at=captured_at,
        slurm_error=error,
        nodes=nodes,
    )
