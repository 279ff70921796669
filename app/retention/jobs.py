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
from app.metrics.models import gpu_sample
from app.nics.models import NicPortSample
from app.nvlinks.models import NvlinkSample
from app.series.blocks import GPU, NVLINK, gpu_sample_block, nvlink_sample_block
from app.storage.models import DiskSample, MountSample, NfsSample

log = logging.getLogger(__name__)


def prune(
    session: Session, *, retention_days: float, now: datetime | None = None
) -> dict[str, int]:
    """Delete rows older than the retention window; a block (an hour of samples) goes when its
    whole hour is older.

    Batch ids are kept as long as samples, so an agent replaying an old spool within the window
    still gets its replay answer instead of a double store.

    Returns:
        rows deleted per table.
    """
    cutoff = (now or utcnow()) - timedelta(days=retention_days)
    statements = {
        "gpu_sample": delete(gpu_sample).where(gpu_sample.c.sampled_at < cutoff),
        "gpu_sample_block": delete(gpu_sample_block).where(
            gpu_sample_block.c.block_start <= cutoff - timedelta(seconds=GPU.block_s)
        ),
        "nvlink_sample": delete(NvlinkSample).where(NvlinkSample.sampled_at < cutoff),
        "nvlink_sample_block": delete(nvlink_sample_block).where(
            nvlink_sample_block.c.block_start <= cutoff - timedelta(seconds=NVLINK.block_s)
        ),
        "disk_sample": delete(DiskSample).where(DiskSample.sampled_at < cutoff),
        "mount_sample": delete(MountSample).where(MountSample.sampled_at < cutoff),
        "nfs_sample": delete(NfsSample).where(NfsSample.sampled_at < cutoff),
        "nic_port_sample": delete(NicPortSample).where(NicPortSample.sampled_at < cutoff),
        "node_event": delete(NodeEvent).where(NodeEvent.occurred_at < cutoff),
        "ingest_batch": delete(IngestBatch).where(IngestBatch.received_at < cutoff),
    }
    deleted: dict[str, int] = {}
    for table, statement in statements.items():
        result = cast(CursorResult[Any], session.execute(statement))
        deleted[table] = int(result.rowcount or 0)
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
