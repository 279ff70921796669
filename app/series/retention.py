"""Retention of the sample tables: raw rows and blocks older than the retention, current
readings of entities gone for longer, and the arrival feed's hour."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete
from sqlalchemy.orm import Session

from app.series import arrivals, latest
from app.series.blocks import SPECS, block_end


def prune(session: Session, *, cutoff: datetime, now: datetime) -> dict[str, int]:
    """Delete raw samples read before ``cutoff`` and blocks whose whole span (an hour, 6 hours
    or a day; a GPU block's own width) is older; a host entity's or NVLink's current reading
    (:mod:`app.series.latest`) when it is older; the arrival feed's rows older than an hour
    before ``now`` (:mod:`app.series.arrivals`).

    Returns:
        rows deleted per table.
    """
    deleted: dict[str, int] = {}
    postgres = session.get_bind().dialect.name == "postgresql"
    for spec in SPECS:
        block = spec.block
        # A block goes once its whole span is older: every block of a series with a width of
        # its own ends by the cutoff (its start bounds the index range); on SQLite, where the
        # block tables stay empty, the widest span bounds it alone.
        old = [block.c.block_start <= cutoff - timedelta(seconds=spec.block_s)]
        if spec.wide_s is not None:
            old.append(
                block_end(spec) <= cutoff
                if postgres
                else block.c.block_start <= cutoff - timedelta(seconds=spec.max_block_s)
            )
        statements = {
            spec.raw.name: delete(spec.raw).where(spec.raw.c.sampled_at < cutoff),
            block.name: delete(block).where(*old),
        }
        for table, statement in statements.items():
            result = cast(CursorResult[Any], session.execute(statement))
            deleted[table] = int(result.rowcount or 0)
    deleted |= latest.prune(session, cutoff=cutoff)
    deleted["sample_arrival"] = arrivals.prune(session, now=now)
    return deleted
