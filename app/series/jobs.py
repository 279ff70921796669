"""The scheduled compaction: how much stays raw, and the job wrapper.

Alert rule windows and the health throttle window scan ``gpu_sample`` raw rows (their SQL is
tuned to its indexes), so GPU rows stay raw for the longest of ``compact_after_s``, every
enabled rule's GPU window (threshold and rate windows on the ``gpu`` target, metric absence's
``after``) and the throttle window, each plus :data:`~app.timeseries.LATEST_WINDOW_S` of
clock-skew margin. A team that writes a 7-day rule keeps 7 days raw: correct first, then
compact.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from app.alerts import store as alert_store
from app.db import session_scope
from app.series.compact import CompactResult, compact
from app.timeseries import LATEST_WINDOW_S

log = logging.getLogger(__name__)


def gpu_raw_span_s(session: Session, *, health_throttle_window_s: float) -> float:
    """Seconds of ``gpu_sample`` that readers scan as raw rows (see the module docstring)."""
    longest = max(alert_store.longest_gpu_sample_window_s(session), health_throttle_window_s)
    return longest + LATEST_WINDOW_S


def run(
    factory: sessionmaker[Session],
    *,
    compact_after_s: float,
    health_throttle_window_s: float,
    minutes_after_days: float = 7.0,
    now: datetime | None = None,
) -> CompactResult:
    """One compaction pass with the raw span the rules need; GPU 1-minute rollups packed
    after ``minutes_after_days``."""
    with session_scope(factory) as session:
        if session.get_bind().dialect.name != "postgresql":
            return CompactResult()
        raw_s = gpu_raw_span_s(session, health_throttle_window_s=health_throttle_window_s)
    return compact(
        factory,
        compact_after_s=compact_after_s,
        gpu_raw_s=raw_s,
        minutes_after_s=minutes_after_days * 86400.0,
        now=now,
    )


def compact_job(
    factory: sessionmaker[Session],
    compact_after_s: float,
    health_throttle_window_s: float,
    minutes_after_days: float,
) -> None:
    """Scheduled wrapper: errors logged and never raised into the scheduler."""
    try:
        result = run(
            factory,
            compact_after_s=compact_after_s,
            health_throttle_window_s=health_throttle_window_s,
            minutes_after_days=minutes_after_days,
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
