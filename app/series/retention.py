"""Retention of the sample tables: raw rows and blocks older than the retention, current
readings of entities gone for longer, and the arrival feed's hour."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete
from sqlalchemy.orm import Session

from app.series import arrivals, latest
from app.series.blocks import SPECS


def prune(session: Session, *, cutoff: datetime, now: datetime) -> dict[str, int]:
    """Delete raw samples read before ``cutoff`` and blocks whose whole span (an hour, 6 hours
    or a day) is older; a host entity's or NVLink's current reading (:mod:`app.series.latest`)
    when it is older; the arrival feed's rows older than an hour before ``now``
    (:mod:`app.series.arrivals`).

    Returns:
        rows deleted per table.
    """
    deleted: dict[str, int] = {}
    for spec in SPECS:
        statements = {
            spec.raw.name: delete(spec.raw).where(spec.raw.c.sampled_at < cutoff),
            spec.block.name: delete(spec.block).where(
                spec.block.c.block_start <= cutoff - timedelta(seconds=spec.block_s)
            ),
        }
        for table, statement in statements.items():
            result = cast(CursorResult[Any], session.execute(statement))
            deleted[table] = int(result.rowcount or 0)
    deleted |= latest.prune(session, cutoff=cutoff)
    deleted["sample_arrival"] = arrivals.prune(session, now=now)
    return deleted
