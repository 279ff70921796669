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
inside it come from the rollup, and the partial ones at either edge from the raw rows, so every
aggregate is that of exactly the raw samples in the window. Rows come as parts — Σ, count,
max, min — that the caller aggregates (``Σ sums ÷ Σ counts`` for a mean), so results equal those
of the raw query (to the last bit when the sums are exact in floating point, as for integer or
binary-fraction values; otherwise up to the summation order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Subquery, Table, case, select, union_all
from sqlalchemy.orm import Session

from app.db import epoch_s
from app.rollups.specs import Spec, raw_value

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
) -> Subquery:
    """Rows to aggregate for ``[start, end]``: columns ``spec.keys``, ``t_s`` (Unix seconds of
    the sample, or of the rollup bucket's start) and ``<field>_<kind>`` for each ``(field,
    kind)`` of ``fields`` (kinds ``sum``, ``n``, ``max``, ``min``). Aggregate them with SUM for
    ``sum`` and ``n``, MAX and MIN for the others. ``where(table)`` gives the filters (owners,
    keys), applied alike to the raw and the rollup table.

    With ``resolution_s`` 0 every row is raw; otherwise the whole rollup buckets inside the
    window, plus the raw rows of the partial buckets at its edges.
    """
    dialect = session.get_bind().dialect.name
    raw = spec.raw

    def from_raw(*time: Any) -> Any:
        columns = []
        for name, kind in fields:
            value = raw_value(spec, spec.field(name), dialect, for_order=kind in ("max", "min"))
            if kind == "n":
                value = case((value.is_not(None), 1), else_=0)
            columns.append(value.label(f"{name}_{kind}"))
        keys = [raw.c[k] for k in spec.keys]
        stmt = select(*keys, epoch_s(raw.c.sampled_at).label("t_s"), *columns)
        return stmt.where(*where(raw), *time)

    if resolution_s == 0:
        return from_raw(raw.c.sampled_at >= start, raw.c.sampled_at <= end).subquery("parts")
    first = math.ceil(start.timestamp() / resolution_s) * resolution_s
    stop = math.floor(end.timestamp() / resolution_s) * resolution_s
    if stop <= first:
        return from_raw(raw.c.sampled_at >= start, raw.c.sampled_at <= end).subquery("parts")
    table = spec.tables[resolution_s]
    rolled = select(
        *(table.c[k] for k in spec.keys),
        table.c.bucket_start_s.label("t_s"),
        *(table.c[f"{name}_{kind}"].label(f"{name}_{kind}") for name, kind in fields),
    ).where(*where(table), table.c.bucket_start_s >= first, table.c.bucket_start_s < stop)
    head = from_raw(raw.c.sampled_at >= start, raw.c.sampled_at < _at(first))
    tail = from_raw(raw.c.sampled_at >= _at(stop), raw.c.sampled_at <= end)
    return union_all(head, rolled, tail).subquery("parts")
