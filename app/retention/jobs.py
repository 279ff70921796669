"""Retention: delete raw samples (GPU and node sections) older than ``raw_retention_days``,
events and batch ids older than ``retention_days``, audit events older than
``audit_retention_days``, closed login sessions and failed logins past their window; the
rollups have their own retention (:mod:`app.series.rollups.jobs`). Topology snapshots are
kept: they are few, and the current one may be old."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete
from sqlalchemy.orm import Session, sessionmaker

from app.access import sessions as access_sessions
from app.audit import service as audit_service
from app.db import session_scope, utcnow
from app.events.models import NodeEvent
from app.incidents import service as incidents_service
from app.ingest.models import IngestBatch
from app.series import retention as series_retention

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccessRetention:
    """How long the access tables keep their rows (the settings of the same names)."""

    audit_retention_days: float
    session_idle_s: float
    login_failure_window_s: float


def prune(
    session: Session,
    *,
    retention_days: float,
    raw_retention_days: float | None = None,
    access: AccessRetention | None = None,
    now: datetime | None = None,
) -> dict[str, int]:
    """Delete events and batch ids older than ``retention_days``, and raw samples, current
    readings and the arrival feed (:func:`app.series.retention.prune`) older than
    ``raw_retention_days`` (default: ``retention_days``); a block (an hour, 6 hours or a day
    of samples) goes when its whole span is older. With ``access``: also audit events, closed
    sessions and failed logins (:class:`AccessRetention`).

    Batch ids are kept as long as the longer of the two (the ingest refuses samples older than
    the raw retention), so an agent replaying an old spool within the window still gets its replay
    answer instead of a double store.

    Returns:
        rows deleted per table.
    """
    at = now or utcnow()
    cutoff = at - timedelta(days=retention_days)
    raw_days = retention_days if raw_retention_days is None else raw_retention_days
    deleted = series_retention.prune(session, cutoff=at - timedelta(days=raw_days), now=at)
    statements: dict[str, Any] = {
        "node_event": delete(NodeEvent).where(NodeEvent.occurred_at < cutoff),
        "ingest_batch": delete(IngestBatch).where(
            IngestBatch.received_at < at - timedelta(days=max(retention_days, raw_days))
        ),
    }
    for table, statement in statements.items():
        result = cast(CursorResult[Any], session.execute(statement))
        deleted[table] = int(result.rowcount or 0)
    # Incidents last as long as their events (an incident's events are deleted with it).
    deleted["incident"] = incidents_service.prune(session, cutoff=cutoff)
    if access is not None:
        deleted["audit_event"] = audit_service.prune(
            session, cutoff=at - timedelta(days=access.audit_retention_days)
        )
        deleted |= access_sessions.prune(
            session,
            idle_s=access.session_idle_s,
            failure_window_s=access.login_failure_window_s,
            now=at,
        )
    return deleted


def prune_job(
    factory: sessionmaker[Session],
    retention_days: float,
    raw_retention_days: float,
    access: AccessRetention | None = None,
) -> None:
    """Scheduled wrapper: one transaction, errors logged and never raised into the scheduler."""
    try:
        with session_scope(factory) as session:
            deleted = prune(
                session,
                retention_days=retention_days,
                raw_retention_days=raw_retention_days,
                access=access,
            )
        if any(deleted.values()):
            log.info("retention prune deleted %s", deleted)
    except Exception:
        log.exception("retention prune failed")
