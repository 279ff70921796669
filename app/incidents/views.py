"""Incidents as the API and pages show them: rows and details with the alerts they caused."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from app.alerts import service as alerts_service
from app.incidents import service
from app.incidents.schemas import (
    IncidentAlertOut,
    IncidentDetailOut,
    IncidentEventOut,
    IncidentJobCaptureOut,
    IncidentJobOut,
    IncidentOut,
    IncidentTopologyOut,
)
from app.topology import service as topology_service
from app.workloads import service as workloads

#: Alerts that turn active this long after an incident's last event still count as its own
#: (an alert's ``for`` and the evaluation interval lag the event).
ALERT_LAG = service.ALERT_LAG


def incident_out(row: service.IncidentRow) -> IncidentOut:
    """The API model of ``row``."""
    i = row.incident
    return IncidentOut(
        id=i.id,
        hostname=row.hostname,
        open=row.open,
        opened_at=i.opened_at,
        last_event_at=i.last_event_at,
        closes_at=row.closes_at,
        event_count=i.event_count,
        gpu_indexes=list(i.gpu_indexes),
        xids=list(i.xids),
        kinds=list(i.kinds),
        state=i.state,
        job_fatal=i.job_fatal,
        action_code=i.action_code,
        action_text=i.action_text,
        test=i.test,
    )


def incident_detail(
    session: Session, *, incident_id: int, quiet_s: float, now: datetime
) -> IncidentDetailOut:
    """One incident with its events, the alerts of its node that turned pending or firing
    from its first event to :data:`ALERT_LAG` after it closes, and the node's topology changes
    from a quiet period before its first event to its close (a lost GPU leaves the topology a
    little before or after its Xid).

    Raises:
        NotFound: no such incident.
    """
    row, events = service.get_incident(session, incident_id=incident_id, quiet_s=quiet_s, now=now)
    alerts = alerts_service.alerts_of_host(
        session,
        hostname=row.hostname,
        since=row.incident.opened_at,
        until=row.closes_at + ALERT_LAG,
    )
    changes = topology_service.changes_between(
        session,
        node_id=row.incident.node_id,
        since=row.incident.opened_at - timedelta(seconds=quiet_s),
        until=row.closes_at,
    )
    captured = workloads.jobs_of_incident(
        session, incident_id=row.incident.id, gpu_indexes=list(row.incident.gpu_indexes)
    )
    return IncidentDetailOut(
        **incident_out(row).model_dump(),
        jobs=[
            IncidentJobOut(
                system=h.job.system,
                job_id=h.job.job_id,
                user=h.job.user,
                name=h.job.name,
                partition=h.job.partition,
                state=h.job.state,
                started_at=h.job.started_at,
                ended_at=h.job.ended_at,
                gpu_indexes=h.job.gpu_indexes,
                hit=h.hit,
            )
            for h in captured.jobs
        ],
        jobs_captures=[
            IncidentJobCaptureOut(
                system=c.system, target=c.target, captured_at=c.captured_at, error=c.error
            )
            for c in captured.captures
        ],
        jobs_captured_at=min((c.captured_at for c in captured.captures), default=None),
        jobs_error="; ".join(f"{c.system}: {c.error}" for c in captured.captures if c.error)
        or None,
        topology_changes=[
            IncidentTopologyOut(
                collected_at=c.collected_at, gpus=c.gpus, links=c.links, partial=c.partial
            )
            for c in changes
        ],
        events=[
            IncidentEventOut(
                occurred_at=e.occurred_at,
                kind=e.kind,
                xid=e.xid,
                gpu_index=e.gpu_index,
                pci_bus_id=e.pci_bus_id,
                message=e.message,
            )
            for e in events
        ],
        alerts=[
            IncidentAlertOut(
                id=inst.id,
                rule=rule.name,
                severity=rule.severity,
                state=inst.state,
                summary=inst.summary,
                started_at=at,
            )
            for inst, rule, at in alerts
        ],
    )
