"""The query side: which table a chart reads, and the rows it aggregates.

A chart bucketed by ``step_s`` reads the coarsest source whose buckets nest inside its own:

* raw rows for steps under a minute;
* the 1-minute rollup for steps of 1 min up to (not including) 1 h;
* the 1-hour rollup for steps of 1 h and more.

Steps of 2 h and more in a viewer's zone start at local midnight (:mod:`app.timebounds`). In a
zone whose offsets are whole hours and whose DST changes fall on whole UTC hours, every local
bucket is a union of whole UTC hours, so the 1-hour rollup nests. A zone with a 30- or 45-minute
offset (Asia/Kolkata +05:30, Asia/Kathmandu +05:45, Australia/Adelaide +09:30) or a change at a
half hour (Australia/Lord_Howe) cuts UTC hours in two at local midnight, so those charts read
the 1-minute rollup, whose minutes always nest (and a pre-1972 offset with seconds, raw rows).

The window ``[start, end]`` rarely starts or ends on a bucket boundary: whole source buckets
inside it come from the rollup, and the partial ones at either edge from the finer sources, so every
aggregate is that of exactly the raw samples in the window. Rows come as parts — Σ, count,
max, min — that the caller aggregates (``Σ sums ÷ Σ counts`` for a mean), so results equal those
of the raw query (to the last bit when the sums are exact in floating point, as for integer or
binary-fraction values; otherwise up to the summation order). Samples newer than the fold's
last run (``<raw>:folded_until``) are read raw, so a chart never misses its newest minute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Subquery, Table, case, cast, func, select, union_all
from sqlalchemy.orm import Session

from app.db import epoch_s
from app.series import minute_blocks
from app.series.rollups.specs import Spec, raw_value, read_mark, readable

Where = Callable[[Table], list[Any]]


def source_resolution(step_s: int, segments: list[tuple[datetime, int]] | None = None) -> int:
    """The rollup resolution (3600, 60) a chart of ``step_s`` buckets reads, or 0 for raw rows.

    ``segments`` are the zone's offsets over the window (:func:`app.timebounds.offset_segments`)
    when buckets follow a wall clock, ``None`` when they follow the epoch: a resolution is usable
    only if every offset, and every change of offset, is a whole multiple of it."""
    for resolution in (3600, 60):
        if step_s < resolution or step_s % resolution:
            continue
        if segments is not None:
            offsets_ok = all(offset % resolution == 0 for _, offset in segments)
            changes_ok = all(begin.timestamp() % resolution == 0 for begin, _ in segments[1:])
            if not (offsets_ok and changes_ok):
                continue
        return resolution
    return 0


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def parts(
    session: Session,
    spec: Spec,
    *,
    resolution_s: int,
    start: datetime,
    end: datetime,
    where: Where,
    fields: Sequence[tuple[str, str]],
    step_s: int | None = None,
) -> Subquery:
    """Rows to aggregate for ``[start, end]``: columns ``spec.keys``, ``t_s`` (Unix seconds of
    the sample, or of the rollup bucket's start) and ``<field>_<kind>`` for each ``(field,
    kind)`` of ``fields`` (kinds ``sum``, ``n``, ``max``, ``min``). Aggregate them with SUM for
    ``sum`` and ``n``, MAX and MIN for the others. ``where(table)`` gives the filters (owners,
    keys), applied alike to the raw and the rollup table. With ``step_s`` (epoch-aligned
    buckets that the source's buckets nest in) a ``bucket`` column, ``floor(t / step_s)``,
    replaces ``t_s``: integer arithmetic on the rollup rows, cheaper than a NUMERIC ``t_s``.

    With ``resolution_s`` 0 every row is raw; otherwise, up to the spec's folded-until mark (the
    job's last run; none before the first run or rebuild: all raw), the whole rollup buckets
    inside the window, and for the partial ones at its edges the next finer source (1-hour →
    1-minute → raw), so an edge costs at most 59 minute rows and 59 s of raw rows per series.
    """
    dialect = session.get_bind().dialect.name
    time_label = "bucket" if step_s else "t_s"

    def from_raw(lo: datetime, hi: datetime, hi_closed: bool) -> Any:
        source = readable(spec, lo, hi, dialect, names={name for name, _ in fields})
        raw = source.raw
        columns = []
        for name, kind in fields:
            value = raw_value(source, spec.field(name), dialect, for_order=kind in ("max", "min"))
            if kind == "n":
                value = case((value.is_not(None), 1), else_=0)
            columns.append(value.label(f"{name}_{kind}"))
        keys = [raw.c[k] for k in spec.keys]
        when: Any = epoch_s(raw.c.sampled_at)
        if step_s:
            when = cast(func.floor(when / step_s), BigInteger)
        stmt = select(*keys, when.label(time_label), *columns)
        upper = raw.c.sampled_at <= hi if hi_closed else raw.c.sampled_at < hi
        return stmt.where(*where(raw), raw.c.sampled_at >= lo, upper)

    def pieces(resolution: int, lo: datetime, hi: datetime, hi_closed: bool) -> list[Any]:
        """Selects covering ``[lo, hi]`` (``[lo, hi)`` unless ``hi_closed``): whole buckets of
        ``resolution`` from its rollup, the partial edges from the next finer source."""
        if resolution == 0:
            if lo >= hi and not hi_closed:
                return []
            return [from_raw(lo, hi, hi_closed)]
        finer = FINER[resolution]
        first = math.ceil(lo.timestamp() / resolution) * resolution
        stop = math.floor(hi.timestamp() / resolution) * resolution
        if stop <= first:
            return pieces(finer, lo, hi, hi_closed)
        table: Any = spec.tables[resolution]
        form = minute_blocks.BY_MINUTES.get(table.name) if resolution == 60 else None
        if form is not None:
            table = minute_blocks.minute_rows(
                columns=[f"{name}_{kind}" for name, kind in fields],
                lo_s=first,
                hi_s=stop,
                dialect=dialect,
                form=form,
            )
        rolled = select(
            *(table.c[k] for k in spec.keys),
            (table.c.bucket_start_s // step_s if step_s else table.c.bucket_start_s).label(
                time_label
            ),
            *(table.c[f"{name}_{kind}"].label(f"{name}_{kind}") for name, kind in fields),
        ).where(*where(table), table.c.bucket_start_s >= first, table.c.bucket_start_s < stop)
        return [
            *pieces(finer, lo, _at(first), False),
            rolled,
            *pieces(finer, _at(stop), hi, hi_closed),
        ]

    horizon = read_mark(session, spec.horizon_key) if resolution_s else None
    if horizon is None or horizon <= start:
        selects = pieces(0, start, end, True)
    elif horizon >= end:
        selects = pieces(resolution_s, start, end, True)
    else:
        selects = [*pieces(resolution_s, start, horizon, False), *pieces(0, horizon, end, True)]
    if len(selects) == 1:
        return selects[0].subquery("parts")
    return union_all(*selects).subquery("parts")


#: The source a rollup's partial edge buckets are read from.
FINER = {3600: 60, 60: 0}
