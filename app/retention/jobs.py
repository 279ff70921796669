"""Retention: delete raw samples (GPU and node sections) older than ``raw_retention_days``,
events and batch ids older than ``retention_days``; the rollups have their own retention
(:mod:`app.series.rollups.jobs`). Topology snapshots are kept: they are few, and the current
one may be old."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.events.models import NodeEvent
from app.incidents import service as incidents_service
from app.ingest.models import IngestBatch
from app.series import retention as series_retention

log = logging.getLogger(__name__)


def prune(
    session: Session,
    *,
    retention_days: float,
    raw_retention_days: float | None = None,
    now: datetime | None = None,
) -> dict[str, int]:
    """Delete events and batch ids older than ``retention_days``, and raw samples, current
    readings and the arrival feed (:func:`app.series.retention.prune`) older than
    ``raw_retention_days`` (default: ``retention_days``); a block (an hour, 6 hours or a day
    of samples) goes when its whole span is older.

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
    return deleted


def prune_job(
    factory: sessionmaker[Session], retention_days: float, raw_retention_days: float
) -> None:
    """Scheduled wrapper: one transaction, errors logged and never raised into the scheduler."""
    try:
        with session_scope(factory) as session:
            deleted = prune(
                session, retention_days=retention_days, raw_retention_days=raw_retention_days
            )
        if any(deleted.values()):
            log.info("retention prune deleted %s", deleted)
    except Exception:
        log.exception("retention prune failed")
