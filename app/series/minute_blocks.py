"""1-minute rollups packed by day: one row per series (a GPU; a node's disk, NFS mount or IB
port) and UTC day holding each rollup column of ``<raw>_1m`` as an array over the day's minutes.

The GPU 1-minute rollup was the largest GPU table once samples were packed (≈ 690 bytes a row,
7.9 MB per HGX node per day, kept 90 days); the host ones, at the agent's 60-s host interval,
hold one reading per minute and cost as much as the raw rows they fold (4.2 MB per node per
day). Packed, the mostly constant or slowly moving columns compress like the samples do.

* **pack** (:func:`pack`): minute rows of days wholly older than the horizon (and than the
  rollups' folded-until mark) are deleted and inserted as day blocks in one statement.
* **re-open** (:func:`reopen`): before the rollups recompute a range
  (:func:`app.series.rollups.fold.fold_range`), the blocks overlapping it go back to minute
  rows, so the recompute replaces them instead of adding a second copy.
* **read** (:func:`minute_rows`): the minute rows and the unpacked blocks of a range, as one
  selectable with the columns of the minute table.

Each packed table is described by a :class:`MinuteForm`; the functions take one (the GPU's by
default). Bucket times are stored as steps in seconds from the previous bucket (the first from
``block_start_s``): 60 everywhere but at gaps, so the array costs almost nothing.
Postgres only; on SQLite the tables stay empty and every function is a no-op or the plain table.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
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
from app.series.blocks import array_of
from app.series.rollups.models import DISK_ROLLUPS, GPU_ROLLUPS, NFS_ROLLUPS, NIC_ROLLUPS

DAY_S = 86400


@dataclass(frozen=True)
class MinuteForm:
    """A 1-minute rollup table and its day blocks.

    Attributes:
        minutes: the rollup table (``gpu_sample_1m``): keys + ``bucket_start_s`` + values.
        block: ``<minutes>_block``: keys + ``block_start_s`` + ``bucket_count`` +
            ``bucket_start_delta_s`` + one array per value column.
        keys: the series key, owner (``gpu_id`` / ``node_id``) first.
        values: the value columns (``samples`` and every field × kind), in table order.
    """

    minutes: Table
    block: Table
    keys: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def owner(self) -> str:
        """The owner column (``gpu_id`` or ``node_id``)."""
        return self.keys[0]


def _form(minutes: Table, owner_table: str) -> MinuteForm:
    keys = tuple(c.name for c in minutes.primary_key.columns if c.name != "bucket_start_s")
    values = tuple(c.name for c in minutes.columns if c.name not in (*keys, "bucket_start_s"))
    owner = keys[0]
    block = Table(
        f"{minutes.name}_block",
        Base.metadata,
        Column(
            owner, Integer, ForeignKey(f"{owner_table}.id", ondelete="CASCADE"), primary_key=True
        ),
        *(Column(k, minutes.c[k].type, primary_key=True) for k in keys[1:]),
        Column("block_start_s", BigInteger, primary_key=True, autoincrement=False),
        Column("bucket_count", Integer, nullable=False),
        Column("bucket_start_delta_s", array_of(BigInteger()), nullable=False),
        *(Column(name, array_of(minutes.c[name].type), nullable=False) for name in values),
        Index(f"ix_{minutes.name}_block_block_start_s", "block_start_s"),
    )
    return MinuteForm(minutes, block, keys, values)


GPU = _form(GPU_ROLLUPS[60], "gpu")
DISK = _form(DISK_ROLLUPS[60], "node")
NFS = _form(NFS_ROLLUPS[60], "node")
NIC = _form(NIC_ROLLUPS[60], "node")
FORMS: tuple[MinuteForm, ...] = (GPU, DISK, NFS, NIC)
#: Minute table name → its packed form.
BY_MINUTES: dict[str, MinuteForm] = {f.minutes.name: f for f in FORMS}

#: The GPU form's names, as before the host forms existed.
MINUTES = GPU.minutes
KEY = GPU.owner
VALUES = GPU.values
gpu_sample_1m_block = GPU.block


def _q(name: str) -> str:
    return f'"{name}"'


_DAY = f"(m.bucket_start_s - m.bucket_start_s % {DAY_S})"


def pack_sql(form: MinuteForm) -> str:
    """Minute rows of ``:owners`` before ``:horizon_s`` in days with no block, deleted and
    inserted as day blocks; selects (blocks written, minutes packed)."""
    minutes, block = _q(form.minutes.name), _q(form.block.name)
    keys = ", ".join(f"m.{_q(k)}" for k in form.keys)
    same_key = " AND ".join(f"b.{_q(k)} = m.{_q(k)}" for k in form.keys)
    cols = ", ".join(_q(c) for c in form.values)
    return f"""
WITH moved AS (
    DELETE FROM {minutes} m
    WHERE m.bucket_start_s < :horizon_s
      AND m.{_q(form.owner)} = ANY(:owners)
      AND NOT EXISTS (
        SELECT 1 FROM {block} b
        WHERE {same_key} AND b.block_start_s = {_DAY})
    RETURNING m.*
), stepped AS (
    SELECT m.*, {_DAY} AS block_start_s,
        m.bucket_start_s - coalesce(
            lag(m.bucket_start_s) OVER (PARTITION BY {keys}, {_DAY} ORDER BY m.bucket_start_s),
            {_DAY}) AS step_s
    FROM moved m
), written AS (
    INSERT INTO {block} ({", ".join(_q(k) for k in form.keys)}, block_start_s, bucket_count,
        bucket_start_delta_s, {cols})
    SELECT {keys}, m.block_start_s, count(*), array_agg(m.step_s ORDER BY m.bucket_start_s),
        {", ".join(f"array_agg(m.{_q(c)} ORDER BY m.bucket_start_s)" for c in form.values)}
    FROM stepped m
    GROUP BY {keys}, m.block_start_s
    RETURNING bucket_count
)
SELECT count(*), coalesce(sum(bucket_count), 0) FROM written
"""


def reopen_sql(form: MinuteForm, owner_filter: str) -> str:
    """Blocks meeting ``[:lo_s, :hi_s)`` (and ``owner_filter``) back into minute rows."""
    cols = ", ".join(_q(c) for c in form.values)
    keys = ", ".join(_q(k) for k in form.keys)
    return f"""
WITH opened AS (
    DELETE FROM {_q(form.block.name)} b
    WHERE b.block_start_s < :hi_s AND b.block_start_s + {DAY_S} > :lo_s {owner_filter}
    RETURNING b.*
)
INSERT INTO {_q(form.minutes.name)} ({keys}, bucket_start_s, {cols})
SELECT {", ".join(f"o.{_q(k)}" for k in form.keys)}, o.block_start_s + u.offset_s,
    {", ".join(f"u.{_q(c)}" for c in form.values)}
FROM opened o, LATERAL (
    SELECT sum(d.step_s) OVER (ORDER BY d.ord) AS offset_s,
        {", ".join(f"d.{_q(c)}" for c in form.values)}
    FROM unnest(o.bucket_start_delta_s, {", ".join(f"o.{_q(c)}" for c in form.values)})
        WITH ORDINALITY AS d(step_s, {cols}, ord)) u
ON CONFLICT ({keys}, bucket_start_s) DO NOTHING
"""


#: Owners per packing statement: a database upgraded with 90 days of minute rollups packs
#: 16 × 90 × 1,440 ≈ 2 M rows per statement (GPUs; a node's 8 IB ports: 4 nodes).
OWNERS_PER_BATCH = 16


def pack(
    session: Session, *, owners: Sequence[int], horizon_s: int, form: MinuteForm = GPU
) -> tuple[int, int]:
    """Pack minute rows of ``owners`` of whole UTC days before ``horizon_s`` (rounded down to a
    day) into day blocks (Postgres; flushed, not committed). A day that has a block already
    waits for :func:`reopen`. Returns (blocks written, minutes packed)."""
    if session.get_bind().dialect.name != "postgresql":
        return 0, 0
    day = horizon_s - horizon_s % DAY_S
    params = {"horizon_s": day, "owners": list(owners)}
    written, packed = session.execute(text(pack_sql(form)), params).one()
    return int(written), int(packed)


def reopen(
    session: Session,
    *,
    lo_s: int,
    hi_s: int,
    owners: Collection[int] | None = None,
    form: MinuteForm = GPU,
) -> int:
    """Unpack the day blocks overlapping ``[lo_s, hi_s)`` (of ``owners``; all when ``None``)
    back into minute rows before a recompute of that range; returns minute rows restored. A
    minute row already there (recomputed since) is kept."""
    if session.get_bind().dialect.name != "postgresql":
        return 0
    params: dict[str, Any] = {"lo_s": lo_s, "hi_s": hi_s}
    owner_filter = ""
    if owners is not None:
        owner_filter = f"AND b.{_q(form.owner)} = ANY(:owners)"
        params["owners"] = list(owners)
    result = session.execute(text(reopen_sql(form, owner_filter)), params)
    return int(getattr(result, "rowcount", 0) or 0)


def minute_rows(
    *,
    columns: Sequence[str],
    lo_s: int | None,
    hi_s: int | None,
    dialect: str,
    form: MinuteForm = GPU,
) -> Table | Subquery:
    """The minute table's rows (its keys, ``bucket_start_s`` and ``columns``) with those of
    the day blocks meeting ``[lo_s, hi_s)`` unpacked, as one selectable; the plain table on
    SQLite. Readers still filter ``bucket_start_s`` themselves.

    Raises:
        KeyError: a column is not one of the minute table's value columns.
    """
    for name in columns:
        if name not in form.values:
            raise KeyError(name)
    minutes = form.minutes
    if dialect != "postgresql":
        return minutes
    plain = select(
        *(minutes.c[k] for k in form.keys),
        minutes.c.bucket_start_s,
        *(minutes.c[c] for c in columns),
    )
    return union_all(plain, _unpacked(form, columns, lo_s, hi_s)).subquery(minutes.name)


def _unpacked(
    form: MinuteForm, columns: Sequence[str], lo_s: int | None, hi_s: int | None
) -> Select[Any]:
    block = form.block
    steps = (
        func.unnest(block.c.bucket_start_delta_s, *(block.c[c] for c in columns))
        .table_valued(
            column("step_s", BigInteger()),
            *(column(c, form.minutes.c[c].type) for c in columns),
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
    stmt = select(
        *(block.c[k] for k in form.keys), bucket, *(unpacked.c[c] for c in columns)
    ).select_from(block.join(unpacked, true()))
    if lo_s is not None:
        stmt = stmt.where(block.c.block_start_s > lo_s - DAY_S)
    if hi_s is not None:
        stmt = stmt.where(block.c.block_start_s < hi_s)
    return stmt
