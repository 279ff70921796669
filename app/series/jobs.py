"""The scheduled compaction: how much stays raw, and the job wrapper.

Alert rule windows and the health windows scan raw rows (their SQL is tuned to the raw tables'
indexes), so rows stay raw for the longest of ``compact_after_s`` and every reader's span, plus
:data:`~app.series.writes.LATEST_WINDOW_S` of clock-skew margin:

* ``gpu_sample``: every enabled rule's GPU window (threshold and rate windows on the ``gpu``
  target, metric absence's ``after``) and the health throttle window;
* ``disk_sample``, ``mount_sample``, ``nfs_sample``, ``nic_port_sample``: the threshold and
  rate windows of rules on the ``disk``, ``mount``, ``nfs`` and ``nic`` targets; IB ports also
  the health event window (a port down is dated from its last ACTIVE reading within it).

A team that writes a 7-day rule keeps 7 days raw: correct first, then compact.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from app.alerts import store as alert_store
from app.db import session_scope
from app.series.compact import CompactResult, compact
from app.series.writes import LATEST_WINDOW_S

log = logging.getLogger(__name__)


#: Raw table read by the rules of each alert target.
TARGET_TABLES = {
    "gpu": "gpu_sample",
    "disk": "disk_sample",
    "mount": "mount_sample",
    "nfs": "nfs_sample",
    "nic": "nic_port_sample",
}


def raw_spans_s(
    session: Session, *, health_throttle_window_s: float, health_event_window_s: float
) -> dict[str, float]:
    """Raw table → seconds of it that readers scan as raw rows (see the module docstring);
    tables no reader scans far are left out."""
    spans = {"gpu_sample": health_throttle_window_s, "nic_port_sample": health_event_window_s}
    for target, window_s in alert_store.longest_sample_windows_s(session).items():
        table = TARGET_TABLES.get(target)
        if table is not None:
            spans[table] = max(spans.get(table, 0.0), window_s)
    return {table: span + LATEST_WINDOW_S for table, span in spans.items()}


def run(
    factory: sessionmaker[Session],
    *,
    compact_after_s: float,
    health_throttle_window_s: float,
    health_event_window_s: float = 86400.0,
    minutes_after_days: float = 7.0,
    host_minutes_after_days: float = 1.0,
    now: datetime | None = None,
) -> CompactResult:
    """One compaction pass with the raw spans the rules and health need; GPU 1-minute rollups
    packed after ``minutes_after_days``, the host tables' after ``host_minutes_after_days``."""
    with session_scope(factory) as session:
        if session.get_bind().dialect.name != "postgresql":
            return CompactResult()
        spans = raw_spans_s(
            session,
            health_throttle_window_s=health_throttle_window_s,
            health_event_window_s=health_event_window_s,
        )
    return compact(
        factory,
        compact_after_s=compact_after_s,
        raw_s=spans,
        minutes_after_s=minutes_after_days * 86400.0,
        host_minutes_after_s=host_minutes_after_days * 86400.0,
        now=now,
    )


def compact_job(
    factory: sessionmaker[Session],
    compact_after_s: float,
    health_throttle_window_s: float,
    minutes_after_days: float,
    health_event_window_s: float = 86400.0,
    host_minutes_after_days: float = 1.0,
) -> None:
    """Scheduled wrapper: errors logged and never raised into the scheduler."""
    try:
        result = run(
            factory,
            compact_after_s=compact_after_s,
            health_throttle_window_s=health_throttle_window_s,
            health_event_window_s=health_event_window_s,
            minutes_after_days=minutes_after_days,
            host_minutes_after_days=host_minutes_after_days,
        )
        if any(result.rows_packed.values()) or any(result.blocks_reopened.values()):
            log.info(
                "compaction packed %s rows into %s blocks (re-opened %s)",
                result.rows_packed,
                result.blocks_written,
                result.blocks_reopened,
            )
    except Exception:
        log.exception("compaction failed")
