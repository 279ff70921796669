"""GPU 1-minute rollups packed by day: one row per GPU and UTC day holding each rollup column
of ``gpu_sample_1m`` as an array over the day's minutes.

The 1-minute rollup was the largest GPU table once samples were packed (≈ 690 bytes a row,
7.9 MB per HGX node per day, kept 90 days). Packed, the mostly constant or slowly moving
columns compress like the samples do.

* **pack** (:func:`pack`): minute rows of days wholly older than the horizon (and than the
  rollups' folded-until mark) are deleted and inserted as day blocks in one statement.
* **re-open** (:func:`reopen`): before the rollups recompute a range (:func:`app.rollups.fold.
  fold_range`), the blocks overlapping it go back to minute rows, so the recompute replaces
  them instead of adding a second copy.
* **read** (:func:`minute_rows`): the minute rows and the unpacked blocks of a range, as one
  selectable with the columns of ``gpu_sample_1m``.

Bucket times are stored as steps in seconds from the previous bucket (the first from
``block_start_s``): 60 everywhere but at gaps, so the array costs almost nothing.
Postgres only; on SQLite the table stays empty and every function is a no-op or the plain table.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    Select,
    Subquery,
    Table,
    cast,
    column,
    func,
    select,
    text,
    true,
    union_all,
)
from sqlalchemy.orm import Session

from app.db import Base
from app.rollups.models import GPU_ROLLUPS
from app.series.blocks import array_of

DAY_S = 86400
MINUTES = GPU_ROLLUPS[60]
KEY = "gpu_id"
#: The minute table's value columns (``samples`` and every field × kind), in table order.
VALUES: tuple[str, ...] = tuple(
    c.name for c in MINUTES.columns if c.name not in (KEY, "bucket_start_s")
)

gpu_sample_1m_block = Table(
    "gpu_sample_1m_block",
    Base.metadata,
    Column("gpu_id", Integer, ForeignKey("gpu.id", ondelete="CASCADE"), primary_key=True),
    Column("block_start_s", BigInteger, primary_key=True, autoincrement=False),
    Column("bucket_count", Integer, nullable=False),
    Column("bucket_start_delta_s", array_of(BigInteger()), nullable=False),
    *(Column(name, array_of(MINUTES.c[name].type), nullable=False) for name in VALUES),
    Index("ix_gpu_sample_1m_block_block_start_s", "block_start_s"),
)


def _q(name: str) -> str:
    return f'"{name}"'


_COLS = ", ".join(_q(c) for c in VALUES)
_DAY = f"(m.bucket_start_s - m.bucket_start_s % {DAY_S})"

PACK_SQL = f"""
WITH moved AS (
    DELETE FROM gpu_sample_1m m
    WHERE m.bucket_start_s < :horizon_s
      AND m.gpu_id = ANY(:owners)
      AND NOT EXISTS (
        SELECT 1 FROM gpu_sample_1m_block b
        WHERE b.gpu_id = m.gpu_id AND b.block_start_s = {_DAY})
    RETURNING m.*
), stepped AS (
    SELECT m.*, {_DAY} AS block_start_s,
        m.bucket_start_s - coalesce(
            lag(m.bucket_start_s) OVER (PARTITION BY m.gpu_id, {_DAY} ORDER BY m.bucket_start_s),
            {_DAY}) AS step_s
    FROM moved m
), written AS (
    INSERT INTO gpu_sample_1m_block (gpu_id, block_start_s, bucket_count,
        bucket_start_delta_s, {_COLS})
    SELECT m.gpu_id, m.block_start_s, count(*), array_agg(m.step_s ORDER BY m.bucket_start_s),
        {", ".join(f"array_agg(m.{_q(c)} ORDER BY m.bucket_start_s)" for c in VALUES)}
    FROM stepped m
    GROUP BY m.gpu_id, m.block_start_s
    RETURNING bucket_count
)
SELECT count(*), coalesce(sum(bucket_count), 0) FROM written
"""

REOPEN_SQL = f"""
WITH opened AS (
    DELETE FROM gpu_sample_1m_block b
    WHERE b.block_start_s < :hi_s AND b.block_start_s + {DAY_S} > :lo_s {{owners}}
    RETURNING b.*
)
INSERT INTO gpu_sample_1m (gpu_id, bucket_start_s, {_COLS})
SELECT o.gpu_id, o.block_start_s + u.offset_s, {", ".join(f"u.{_q(c)}" for c in VALUES)}
FROM opened o, LATERAL (
    SELECT sum(d.step_s) OVER (ORDER BY d.ord) AS offset_s,
        {", ".join(f"d.{_q(c)}" for c in VALUES)}
    FROM unnest(o.bucket_start_delta_s, {", ".join(f"o.{_q(c)}" for c in VALUES)})
        WITH ORDINALITY AS d(step_s, {_COLS}, ord)) u
ON CONFLICT (gpu_id, bucket_start_s) DO NOTHING
"""


#: GPUs per packing statement: a database upgraded with 90 days of minute rollups packs
#: 16 × 90 × 1,440 ≈ 2 M rows per statement.
OWNERS_PER_BATCH = 16


def pack(session: Session, *, owners: Sequence[int], horizon_s: int) -> tuple[int, int]:
    """Pack minute rows of ``owners`` of whole UTC days before ``horizon_s`` (rounded down to a
    day) into day blocks (Postgres; flushed, not committed). A day that has a block already
    waits for :func:`reopen`. Returns (blocks written, minutes packed)."""
    if session.get_bind().dialect.name != "postgresql":
        return 0, 0
    day = horizon_s - horizon_s % DAY_S
    params = {"horizon_s": day, "owners": list(owners)}
    written, packed = session.execute(text(PACK_SQL), params).one()
    return int(written), int(packed)


def reopen(session: Session, *, lo_s: int, hi_s: int, owners: Collection[int] | None = None) -> int:
    """Unpack the day blocks overlapping ``[lo_s, hi_s)`` (of ``owners``; all when ``None``)
    back into minute rows before a recompute of that range; returns minute rows restored. A
    minute row already there (recomputed since) is kept."""
    if session.get_bind().dialect.name != "postgresql":
        return 0
    params: dict[str, Any] = {"lo_s": lo_s, "hi_s": hi_s}
    owner_filter = ""
    if owners is not None:
        owner_filter = "AND b.gpu_id = ANY(:owners)"
        params["owners"] = list(owners)
    result = session.execute(text(REOPEN_SQL.format(owners=owner_filter)), params)
    return int(getattr(result, "rowcount", 0) or 0)


def minute_rows(
    *, columns: Sequence[str], lo_s: int | None, hi_s: int | None, dialect: str
) -> Table | Subquery:
    """``gpu_sample_1m``'s rows (``gpu_id``, ``bucket_start_s`` and ``columns``) with those
    of the day blocks meeting ``[lo_s, hi_s)`` unpacked, as one selectable; the plain table on
    SQLite. Readers still filter ``bucket_start_s`` themselves.

    Raises:
        KeyError: a column is not one of the minute table's value columns.
    """
    for name in columns:
        if name not in VALUES:
            raise KeyError(name)
    if dialect != "postgresql":
        return MINUTES
    plain = select(MINUTES.c.gpu_id, MINUTES.c.bucket_start_s, *(MINUTES.c[c] for c in columns))
    return union_all(plain, _unpacked(columns, lo_s, hi_s)).subquery("gpu_sample_1m")


def _unpacked(columns: Sequence[str], lo_s: int | None, hi_s: int | None) -> Select[Any]:
    block = gpu_sample_1m_block
    steps = (
        func.unnest(block.c.bucket_start_delta_s, *(block.c[c] for c in columns))
        .table_valued(
            column("step_s", BigInteger()),
            *(column(c, MINUTES.c[c].type) for c in columns),
            with_ordinality="ord",
        )
        .render_derived(name="d", with_types=False)
    )
    offset = cast(func.sum(steps.c.step_s).over(order_by=steps.c.ord), BigInteger)
    unpacked = (
        select(offset.label("offset_s"), *(steps.c[c] for c in columns))
        .select_from(steps)
        .lateral("u")
    )
    bucket = (block.c.block_start_s + unpacked.c.offset_s).label("bucket_start_s")
    stmt = select(block.c.gpu_id, bucket, *(unpacked.c[c] for c in columns)).select_from(
        block.join(unpacked, true())
    )
    if lo_s is not None:
        stmt = stmt.where(block.c.block_start_s > lo_s - DAY_S)
    if hi_s is not None:
        stmt = stmt.where(block.c.block_start_s < hi_s)
    return stmt
