"""``fleetwatch storage stats``: per sample table, its size on disk (indexes and TOAST included),
samples, stored values and bytes per value, raw and compacted side by side."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.series.blocks import SPECS, BlockSpec


@dataclass(frozen=True)
class TableStats:
    """One table: ``size_bytes`` on disk, ``samples`` (rows, or samples inside blocks),
    ``values`` (samples × value columns, NULLs included: each is a slot that costs space) and
    ``rows`` (table rows)."""

    table: str
    form: str
    size_bytes: int
    rows: int
    samples: int
    values: int

    @property
    def bytes_per_value(self) -> float | None:
        """Size ÷ values; None for an empty table."""
        return self.size_bytes / self.values if self.values else None


def table_stats(session: Session, *, exact: bool = False) -> list[TableStats]:
    """Sizes of every raw and block table of :data:`~app.series.blocks.SPECS` (Postgres).

    Raw row counts are the planner's estimate (``pg_class.reltuples``, kept by autovacuum)
    unless ``exact`` (a ``count(*)``, slow on a large table); block samples are exact
    (``sum(sample_count)``).

    Raises:
        ValueError: the database is not Postgres.
    """
    if session.get_bind().dialect.name != "postgresql":
        raise ValueError("storage stats need Postgres (SQLite keeps raw rows only)")
    return [s for spec in SPECS for s in _of_spec(session, spec, exact)]


def _of_spec(session: Session, spec: BlockSpec, exact: bool) -> list[TableStats]:
    width = len(spec.values)
    raw_size = _size(session, spec.raw.name)
    if exact:
        raw_rows = int(session.scalar(select(func.count()).select_from(spec.raw)) or 0)
    else:
        estimate = session.scalar(
            text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"),
            {"t": spec.raw.name},
        )
        raw_rows = max(0, int(estimate or 0))
    block_rows, block_samples = session.execute(
        select(func.count(), func.coalesce(func.sum(spec.block.c.sample_count), 0))
    ).one()
    return [
        TableStats(spec.raw.name, "raw", raw_size, raw_rows, raw_rows, raw_rows * width),
        TableStats(
            spec.block.name,
            "blocks",
            _size(session, spec.block.name),
            int(block_rows),
            int(block_samples),
            int(block_samples) * width,
        ),
    ]


def _size(session: Session, table: str) -> int:
    return int(
        session.scalar(text("SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": table})
        or 0
    )
