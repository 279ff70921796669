"""Retention: delete samples (GPU and node sections), events and batch ids older than
``retention_days``. Topology snapshots are kept: they are few, and the current one may be old."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.events.models import NodeEvent
from app.ingest.models import IngestBatch
from app.series import arrivals, latest
from app.series.blocks import SPECS

log = logging.getLogger(__name__)


def prune(
    session: Session, *, retention_days: float, now: datetime | None = None
) -> dict[str, int]:
    """Delete rows older than the retention window; a block (an hour, 6 hours or a day of
    samples) goes when its whole span is older.

    Batch ids are kept as long as samples, so an agent replaying an old spool within the window
    still gets its replay answer instead of a double store. A host entity's current state
    (:mod:`app.series.latest`) goes when its newest reading is older. The arrival feed
    (:mod:`app.series.arrivals`) keeps an hour, whatever the retention.

    Returns:
        rows deleted per table.
    """
    at = now or utcnow()
    cutoff = at - timedelta(days=retention_days)
    statements: dict[str, Any] = {}
    for spec in SPECS:
        statements[spec.raw.name] = delete(spec.raw).where(spec.raw.c.sampled_at < cutoff)
        statements[spec.block.name] = delete(spec.block).where(
            spec.block.c.block_start <= cutoff - timedelta(seconds=spec.block_s)
        )
    statements |= {
        "node_event": delete(NodeEvent).where(NodeEvent.occurred_at < cutoff),
        "ingest_batch": delete(IngestBatch).where(IngestBatch.received_at < cutoff),
    }
    deleted: dict[str, int] = {}
    for table, statement in statements.items():
        result = cast(CursorResult[Any], session.execute(statement))
        deleted[table] = int(result.rowcount or 0)
    deleted |= latest.prune(session, cutoff=cutoff)
    deleted["sample_arrival"] = arrivals.prune(session, now=at)
    return deleted


def prune_job(factory: sessionmaker[Session], retention_days: float) -> None:
    """Scheduled wrapper: one transaction, errors logged and never raised into the scheduler."""
    try:
        with session_scope(factory) as session:
            deleted = prune(session, retention_days=retention_days)
        if any(deleted.values()):
            log.info("retention prune deleted %s", deleted)
    except Exception:
        log.exception("retention prune failed")
