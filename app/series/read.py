"""Reading samples whatever their form: the raw rows and the rows unpacked from the blocks
(:mod:`app.series.blocks`) of a time range, as one selectable with the raw table's columns.

Readers filter and aggregate it as they would the raw table (``rows.c.sampled_at``,
``rows.c.gpu_id`` …). Only the blocks whose span (each row's own width) meets ``[start, end]``
are unpacked, and only
the columns asked for (Postgres then decompresses those arrays alone). On SQLite, where nothing
is compacted, it is the raw table's rows.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Double,
    Select,
    Subquery,
    cast,
    column,
    func,
    literal_column,
    select,
    text,
    true,
    type_coerce,
    union_all,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from app.db import UTCDateTime
from app.series.blocks import BY_NAME, GPU, BlockSpec, block_end, end_sql, steps_column


def rows_between(
    table: str,
    *,
    columns: Sequence[str],
    start: datetime | None,
    end: datetime | None,
    dialect: str,
) -> Subquery:
    """Rows of raw table ``table`` (``gpu_sample``, ``nvlink_sample``) with their key columns,
    ``sampled_at``, ``received_at`` where the table has it, and ``columns``, for samples in
    ``[start, end]`` (unbounded on a ``None`` side) — raw and compacted alike.

    The range bounds which blocks are read; readers still filter ``sampled_at`` themselves
    (raw rows are not limited here, so that the planner keeps using their indexes as before).

    Raises:
        KeyError: ``table`` has no block form, or a column is not one of its value columns.
    """
    spec = BY_NAME[table]
    for name in columns:
        if name not in spec.values:
            raise KeyError(name)
    raw = spec.raw
    raw_cols = [
        *(raw.c[k] for k in spec.keys),
        raw.c.sampled_at,
        *([raw.c.received_at] if spec.arrival else []),
        *(raw.c[name] for name in columns),
    ]
    raw_rows = select(*raw_cols)
    if dialect != "postgresql":
        return raw_rows.subquery(table)
    return union_all(raw_rows, _unpacked(spec, columns, start, end)).subquery(table)


def gpu_rows_between(
    *, columns: Sequence[str], start: datetime | None, end: datetime | None, dialect: str
) -> Subquery:
    """:func:`rows_between` of the GPU samples: ``gpu_id``, ``sampled_at``, ``received_at``
    and ``columns`` (metric names).

    Raises:
        KeyError: a name of ``columns`` is not a GPU metric.
    """
    return rows_between(GPU.raw.name, columns=columns, start=start, end=end, dialect=dialect)


def _unpacked(
    spec: BlockSpec, columns: Sequence[str], start: datetime | None, end: datetime | None
) -> Select[Any]:
    """The blocks meeting ``[start, end]`` unnested into rows (``unnest`` of several arrays
    walks them in step: one row per sample); ``sampled_at`` is ``block_start`` plus the running
    sum of ``sampled_at_delta_us`` (µs, exact)."""
    block = spec.block
    raw = spec.raw
    scales = {name: scale for name, scale in spec.stepped if name in columns}
    stepped = [steps_column(name) for name in scales]
    steps = (
        func.unnest(
            block.c.sampled_at_delta_us,
            *(block.c[name] for name in columns),
            *(block.c[name] for name in stepped),
        )
        .table_valued(
            column("dt_us", BigInteger()),
            *(column(name, raw.c[name].type) for name in columns),
            *(column(name, BigInteger()) for name in stepped),
            with_ordinality="ord",
        )
        .render_derived(name="d", with_types=False)
    )
    offset = func.sum(steps.c.dt_us).over(order_by=steps.c.ord)
    values = [
        steps.c[name]
        if name not in scales
        else _stepped_value(steps, name, scales[name]).label(name)
        for name in columns
    ]
    unpacked = select(offset.label("offset_us"), *values).select_from(steps).lateral("u")
    sampled_at = type_coerce(
        block.c.block_start + unpacked.c.offset_us * literal_column("interval '1 microsecond'"),
        UTCDateTime(),
    )
    received = [block.c.received_until.label("received_at")] if spec.arrival else []
    stmt = select(
        *(block.c[k] for k in spec.keys),
        sampled_at.label("sampled_at"),
        *received,
        *(unpacked.c[name] for name in columns),
    ).select_from(block.join(unpacked, true()))
    if start is not None:
        # The widest block bounds the index range; a narrower block ending before ``start``
        # is then left out before its arrays are read.
        stmt = stmt.where(block.c.block_start > start - timedelta(seconds=spec.max_block_s))
        if spec.wide_s is not None:
            stmt = stmt.where(block_end(spec) > start)
    if end is not None:
        stmt = stmt.where(block.c.block_start <= end)
    return stmt


def _stepped_value(steps: Any, name: str, scale: int) -> ColumnElement[Any]:
    """A stepped column's value at an unnested row (:func:`~app.series.blocks.stepped_value_sql`
    as an expression): the double where the block kept doubles, else the running sum of the
    steps, as ``bigint`` then ``float8`` (the conversion the packing checked), over the scale."""
    running = func.sum(steps.c[steps_column(name)]).over(order_by=steps.c.ord)
    as_double: ColumnElement[float] = cast(cast(running, BigInteger()), Double())
    return func.coalesce(steps.c[name], as_double / literal_column(f"{scale}::float8", Double()))


def _any_block(spec: BlockSpec, n: int) -> str:
    """``EXISTS`` of a block of ``spec`` for one of ``:owners_<n>`` meeting
    ``[:lo_<n>, :hi_<n>]``."""
    lo = f"CAST(:lo_{n} AS timestamptz)"
    ends = f" AND {end_sql(spec, 'b')} > {lo}" if spec.wide_s is not None else ""
    return (
        f"EXISTS (SELECT 1 FROM {spec.block.name} b WHERE b.{spec.owner} = ANY(:owners_{n})"
        f" AND b.block_start > {lo} - make_interval(secs => {spec.max_block_s}){ends}"
        f" AND b.block_start <= CAST(:hi_{n} AS timestamptz))"
    )


Key = tuple[Any, ...]


@functools.lru_cache(maxsize=64)
def _probes(tables: tuple[str, ...]) -> TextClause:
    """The statement of :func:`packed_among`'s probes for ``tables`` in that order, built once
    per combination (a batch names the same few tables every time; parsing a ``text()`` for
    its parameters at every batch cost more than running it)."""
    probes = (_any_block(BY_NAME[table], n) for n, table in enumerate(tables))
    return text(f"SELECT {', '.join(probes)}")


def packed_keys(session: Session, *, table: str, keys: Collection[Key]) -> set[Key]:
    """Which of ``keys`` (the raw table's primary key: owner, natural key…, ``sampled_at``)
    are stored in ``table``'s blocks already (Postgres; an empty set elsewhere):
    :func:`packed_among` for one table.

    Raises:
        KeyError: ``table`` has no block form.
    """
    return packed_among(session, {table: keys})[table]


def packed_among(session: Session, wanted: Mapping[str, Collection[Key]]) -> dict[str, set[Key]]:
    """Per raw table of ``wanted``, which of its keys (owner, natural key…, ``sampled_at``) are
    stored in its blocks already (Postgres; empty sets elsewhere). Ingest asks it before
    storing, so that a sample or reading re-sent after its block was packed is a duplicate, as
    it would be against a raw row.

    One statement of index probes for every table (does a block meet the keys' owners and
    time span?); for a batch of recent samples and readings (newer than every block) that is
    all, and nothing is unpacked. Only a table with such a block is then unpacked over the span.

    Raises:
        KeyError: a table has no block form.
    """
    out: dict[str, set[Key]] = {table: set() for table in wanted}
    specs = {table: BY_NAME[table] for table in wanted}
    todo = [(table, keys) for table, keys in wanted.items() if keys]
    if not todo or session.get_bind().dialect.name != "postgresql":
        return out
    params: dict[str, Any] = {}
    for n, (_, keys) in enumerate(todo):
        stamps = [key[-1] for key in keys]
        params |= {
            f"owners_{n}": sorted({key[0] for key in keys}),
            f"lo_{n}": min(stamps),
            f"hi_{n}": max(stamps),
        }
    # The usual batch (recent samples, no block yet) is answered by this one statement;
    # building and compiling the unpacking statement per batch took ~16 % of the server's CPU
    # at 1,000 nodes.
    hits = session.execute(_probes(tuple(table for table, _ in todo)), params).one()
    for n, ((table, keys), hit) in enumerate(zip(todo, hits, strict=True)):
        if not hit:
            continue
        spec = specs[table]
        unpacked = _unpacked(spec, [], params[f"lo_{n}"], params[f"hi_{n}"]).subquery()
        stmt = select(*(unpacked.c[k] for k in spec.keys), unpacked.c.sampled_at).where(
            unpacked.c[spec.owner].in_(params[f"owners_{n}"]),
            unpacked.c.sampled_at >= params[f"lo_{n}"],
            unpacked.c.sampled_at <= params[f"hi_{n}"],
        )
        out[table] = {tuple(row) for row in session.execute(stmt)} & set(keys)
    return out
