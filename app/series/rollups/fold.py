"""Folding raw samples into the rollup tables: a range of buckets is always *recomputed* from
its source (raw rows for 1-minute buckets, 1-minute rows for 1-hour buckets), never
incremented, so running a fold twice, or over a range that overlaps the last one, gives the
same rows (idempotent), and a late or out-of-order sample is counted exactly once as soon as
its bucket is folded again.

Recomputation is ``DELETE`` of the buckets in range, then ``INSERT … SELECT … GROUP BY``, in the
caller's transaction: one statement pair per range, the same SQL on Postgres and SQLite, and a
bucket whose raw rows are gone (node deleted, pruned) disappears instead of lingering as an
upsert would leave it.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ARRAY, BigInteger, ColumnElement, Table, and_, cast, delete, func, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session

from app.db import epoch_s
from app.series import minute_blocks
from app.series.rollups.specs import Spec, ordered, raw_value, readable

MINUTE_S = 60
HOUR_S = 3600


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _owner_filter(table: Table, spec: Spec, owners: Collection[int] | None) -> list[Any]:
    return [] if owners is None else [table.c[spec.owner].in_(sorted(owners))]


def fold_minutes(
    session: Session, spec: Spec, *, lo_s: int, hi_s: int, owners: Collection[int] | None = None
) -> int:
    """Recompute the 1-minute buckets starting in ``[lo_s, hi_s)`` (Unix seconds, multiples of
    60) of ``owners`` (all when ``None``) from the raw rows; returns the buckets written.

    Per bucket: ``samples`` = rows, ``sum`` = Σ, ``n`` = count of non-NULL values, ``max``/
    ``min`` over the rows (NULLs ignored), ``last`` = the value of the newest row (its
    ``sampled_at`` is the bucket's maximum; the primary key makes that row unique).
    """
    dialect = session.get_bind().dialect.name
    spec = readable(spec, _at(lo_s), _at(hi_s), dialect)
    raw, table = spec.raw, spec.tables[MINUTE_S]
    bucket = cast(func.floor(epoch_s(raw.c.sampled_at) / MINUTE_S), BigInteger) * MINUTE_S
    aggregates: list[ColumnElement[Any]] = []
    lasts = []
    for f in spec.fields:
        for kind in f.kinds:
            if kind == "last":
                lasts.append(f)
                continue
            value = raw_value(spec, f, dialect, for_order=kind in ("max", "min"))
            agg: Any = {"sum": func.sum, "n": func.count, "max": func.max, "min": func.min}[kind]
            aggregates.append(agg(value).label(f.column(kind)))
    keys = [raw.c[k] for k in spec.keys]
    if lasts and dialect == "postgresql":
        # The newest row's value in the same pass. A self-join on the newest time, over raw
        # rows and unpacked blocks (one union), made Postgres unpack every overlapping day
        # block again per bucket (NFS and IB port minutes over packed days: seconds per hour).
        aggregates += [
            func.array_agg(
                aggregate_order_by(raw.c[f.name], raw.c.sampled_at.desc()),
                type_=ARRAY(raw.c[f.name].type),
            )[1].label(f.column("last"))
            for f in lasts
        ]
        lasts = []
    grouped = (
        select(
            *keys,
            bucket.label("bucket_start_s"),
            func.count().label("samples"),
            *aggregates,
            func.max(raw.c.sampled_at).label("last_at"),
        )
        .where(
            raw.c.sampled_at >= _at(lo_s),
            raw.c.sampled_at < _at(hi_s),
            *_owner_filter(raw, spec, owners),
        )
        .group_by(*keys, bucket)
        .subquery()
    )
    names = [*spec.keys, "bucket_start_s", "samples", *(a.name for a in aggregates)]
    columns = [grouped.c[n] for n in names]
    stmt = select(*columns)
    if lasts:
        newest = raw.alias("newest")
        stmt = select(*columns, *(newest.c[f.name] for f in lasts)).where(
            *(newest.c[k] == grouped.c[k] for k in spec.keys),
            newest.c.sampled_at == grouped.c.last_at,
        )
        names += [f.column("last") for f in lasts]
    return _replace(session, table, spec, lo_s, hi_s, owners, names, stmt)


def fold_hours(
    session: Session, spec: Spec, *, lo_s: int, hi_s: int, owners: Collection[int] | None = None
) -> int:
    """Recompute the 1-hour buckets starting in ``[lo_s, hi_s)`` (multiples of 3600) from the
    1-minute rollup: Σ of ``samples``, ``sum`` and ``n``, max of ``max``, min of ``min``, and
    ``last`` of the hour's newest minute; returns the buckets written."""
    src, table = spec.tables[MINUTE_S], spec.tables[HOUR_S]
    hour = (src.c.bucket_start_s // HOUR_S) * HOUR_S
    aggregates: list[ColumnElement[Any]] = []
    lasts = []
    for f in spec.fields:
        for kind in f.kinds:
            if kind == "last":
                lasts.append(f)
                continue
            agg: Any = {"sum": func.sum, "n": func.sum, "max": func.max, "min": func.min}[kind]
            aggregates.append(agg(src.c[f.column(kind)]).label(f.column(kind)))
    keys = [src.c[k] for k in spec.keys]
    grouped = (
        select(
            *keys,
            hour.label("bucket_start_s"),
            func.sum(src.c.samples).label("samples"),
            *aggregates,
            func.max(src.c.bucket_start_s).label("last_minute"),
        )
        .where(
            src.c.bucket_start_s >= lo_s,
            src.c.bucket_start_s < hi_s,
            *_owner_filter(src, spec, owners),
        )
        .group_by(*keys, hour)
        .subquery()
    )
    names = [*spec.keys, "bucket_start_s", "samples", *(a.name for a in aggregates)]
    columns = [grouped.c[n] for n in names]
    stmt = select(*columns)
    if lasts:
        newest = src.alias("newest")
        stmt = select(*columns, *(newest.c[f.column("last")] for f in lasts)).where(
            *(newest.c[k] == grouped.c[k] for k in spec.keys),
            newest.c.bucket_start_s == grouped.c.last_minute,
        )
        names += [f.column("last") for f in lasts]
    return _replace(session, table, spec, lo_s, hi_s, owners, names, stmt)


def fold_fleet(session: Session, spec: Spec, *, lo_s: int, hi_s: int) -> int:
    """Recompute the fleet-wide minute buckets (``spec.fleet``) starting in ``[lo_s, hi_s)``
    from the 1-minute rollup, over every key whatever owners the minutes were folded for:
    Σ of each gauge's ``sum`` and ``n``, the keys (``series``) and ``samples``. Returns the
    buckets written (0 when the spec has no fleet table)."""
    table = spec.fleet
    if table is None:
        return 0
    src = spec.tables[MINUTE_S]
    sums = [
        func.sum(src.c[c.name]).label(c.name) for c in table.c if c.name.endswith(("_sum", "_n"))
    ]
    stmt = (
        select(
            src.c.bucket_start_s,
            func.count().label("series"),
            func.sum(src.c.samples).label("samples"),
            *sums,
        )
        .where(src.c.bucket_start_s >= lo_s, src.c.bucket_start_s < hi_s)
        .group_by(src.c.bucket_start_s)
    )
    names = ["bucket_start_s", "series", "samples", *(c.name for c in sums)]
    return _replace(session, table, spec, lo_s, hi_s, None, names, stmt)


def _replace(
    session: Session,
    table: Table,
    spec: Spec,
    lo_s: int,
    hi_s: int,
    owners: Collection[int] | None,
    names: list[str],
    stmt: Any,
) -> int:
    """Delete the buckets of ``table`` in ``[lo_s, hi_s)`` of ``owners`` and insert ``stmt``."""
    session.execute(
        delete(table).where(
            and_(
                table.c.bucket_start_s >= lo_s,
                table.c.bucket_start_s < hi_s,
                *_owner_filter(table, spec, owners),
            )
        )
    )
    result: Any = session.execute(table.insert().from_select(names, stmt))
    if result.rowcount is not None and result.rowcount >= 0:
        return int(result.rowcount)
    # psycopg reports -1 for INSERT … SELECT here (the engine's executemany settings): count.
    count = select(func.count()).where(
        table.c.bucket_start_s >= lo_s,
        table.c.bucket_start_s < hi_s,
        *_owner_filter(table, spec, owners),
    )
    return int(session.scalar(count.select_from(table)) or 0)


def fold_range(
    session: Session, spec: Spec, *, lo_s: float, hi_s: float, owners: Collection[int] | None = None
) -> tuple[int, int]:
    """Recompute every bucket that holds a sample of ``[lo_s, hi_s)``: the minutes it touches
    from raw rows, then the hours those minutes belong to. Returns (minute, hour) buckets
    written."""
    m_lo = math.floor(lo_s / MINUTE_S) * MINUTE_S
    m_hi = math.ceil(hi_s / MINUTE_S) * MINUTE_S
    if m_hi <= m_lo:
        m_hi = m_lo + MINUTE_S
    h_lo = math.floor(m_lo / HOUR_S) * HOUR_S
    h_hi = math.ceil(m_hi / HOUR_S) * HOUR_S
    form = minute_blocks.BY_MINUTES.get(spec.tables[MINUTE_S].name)
    if form is not None:
        # Packed minutes of these hours go back to rows, so the recompute replaces them.
        minute_blocks.reopen(session, lo_s=h_lo, hi_s=h_hi, owners=owners, form=form)
    minutes = fold_minutes(session, spec, lo_s=m_lo, hi_s=m_hi, owners=owners)
    hours = fold_hours(session, spec, lo_s=h_lo, hi_s=h_hi, owners=owners)
    fold_fleet(session, spec, lo_s=m_lo, hi_s=m_hi)
    return minutes, hours


__all__ = [
    "HOUR_S",
    "MINUTE_S",
    "fold_fleet",
    "fold_hours",
    "fold_minutes",
    "fold_range",
    "ordered",
]
