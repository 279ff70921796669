"""``fleetwatch storage stats`` and ``/admin/store``: per sample table and tier, its size on disk
(indexes and TOAST included), rows, samples, values, bytes per value and recent ingest rate."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Table, func, select, text
from sqlalchemy.orm import Session

from app.db import Base, utcnow
from app.series import latest, minute_blocks
from app.series.blocks import SPECS

#: Rollup tiers: table name suffix → tier label.
ROLLUP_TIERS = {"_1m": "1 min", "_1h": "1 h"}
ROLLED_UP = ("gpu_sample", "disk_sample", "nfs_sample", "nic_port_sample")
#: Tier labels of block widths, seconds (a table whose blocks have either width of
#: ``BlockSpec.widths`` is labelled ``hour/day blocks``).
BLOCK_TIERS = {3600: "hour", 86400: "day"}
#: The tier of the host entities' current readings (:mod:`app.series.latest`).
CURRENT_TIER = "current"
#: Window of the recent ingest rate, seconds.
RATE_WINDOW_S = 300.0


@dataclass(frozen=True)
class TableStats:
    """One table: ``size_bytes`` on disk, ``rows`` (table rows), ``samples`` (rows, or the
    samples inside blocks), ``values`` (samples × value columns, NULLs included: each is a slot
    that costs space) and ``rows_per_s`` (samples stored over the last
    :data:`RATE_WINDOW_S`, raw tiers only; None elsewhere)."""

    table: str
    tier: str
    size_bytes: int
    rows: int
    samples: int
    values: int
    rows_per_s: float | None = None

    @property
    def bytes_per_value(self) -> float | None:
        """Size ÷ values; None for an empty table."""
        return self.size_bytes / self.values if self.values else None


def table_stats(
    session: Session, *, exact: bool = False, now: datetime | None = None
) -> list[TableStats]:
    """Every sample table by tier (Postgres): GPU, NVLink, disk, mount, NFS and IB port raw
    rows and blocks, the packed 1-minute rollups (day blocks; ``samples`` are minute
    buckets), the 1-minute and 1-hour rollup tables, then the host entities' current readings
    (``current``: one row per entity).

    Row counts of tables without blocks are the planner's estimate (``pg_class.reltuples``,
    kept by autovacuum) unless ``exact`` or the table was never analysed (then a ``count(*)``,
    slow on a large table); samples in blocks are exact (``sum(sample_count)``).

    Raises:
        ValueError: the database is not Postgres.
    """
    if session.get_bind().dialect.name != "postgresql":
        raise ValueError("storage stats need Postgres (SQLite keeps raw rows only)")
    since = (now or utcnow()) - timedelta(seconds=RATE_WINDOW_S)
    out: list[TableStats] = []
    for spec in SPECS:
        out.append(_plain(session, spec.raw, "raw", exact, since))
        rows, samples = session.execute(
            select(func.count(), func.coalesce(func.sum(spec.block.c.sample_count), 0))
        ).one()
        width = len(spec.values)
        size = _size(session, spec.block.name)
        tier = "/".join(BLOCK_TIERS.get(w, f"{w // 3600}-h") for w in spec.widths) + " blocks"
        out.append(TableStats(spec.block.name, tier, size, rows, samples, samples * width))
    tables = Base.metadata.tables
    for form in minute_blocks.FORMS:
        packed = form.block
        rows, buckets = session.execute(
            select(func.count(), func.coalesce(func.sum(packed.c.bucket_count), 0))
        ).one()
        size = _size(session, packed.name)
        width = len(form.values)
        out.append(TableStats(packed.name, "1 min, days", size, rows, buckets, buckets * width))
    for suffix, tier in ROLLUP_TIERS.items():
        out.extend(_plain(session, tables[name + suffix], tier, exact, None) for name in ROLLED_UP)
    out.extend(_plain(session, spec.table, CURRENT_TIER, exact, None) for spec in latest.SPECS)
    return out


def _plain(
    session: Session, table: Table, tier: str, exact: bool, since: datetime | None
) -> TableStats:
    """A table of one row per sample (or bucket)."""
    if exact:
        rows = int(session.scalar(select(func.count()).select_from(table)) or 0)
    else:
        estimate = session.scalar(
            text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"),
            {"t": table.name},
        )
        if estimate is None or estimate < 0:  # never analysed yet: no estimate, count
            estimate = session.scalar(select(func.count()).select_from(table))
        rows = max(0, int(estimate or 0))
    keys = {c.name for c in table.primary_key.columns} | {"received_at", "sampled_at"}
    width = len([c for c in table.columns if c.name not in keys])
    rate = None
    if since is not None:
        recent = session.scalar(
            select(func.count()).select_from(table).where(table.c.sampled_at >= since)
        )
        rate = int(recent or 0) / RATE_WINDOW_S
    return TableStats(table.name, tier, _size(session, table.name), rows, rows, rows * width, rate)


def _size(session: Session, table: str) -> int:
    return int(
        session.scalar(text("SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": table})
        or 0
    )
