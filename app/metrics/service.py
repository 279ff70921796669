"""Reading GPU samples over a time range, downsampled to a step chosen from the range."""

from __future__ import annotations

import itertools
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import case, func, literal, select
from sqlalchemy.orm import Session

from app.db import epoch_s
from app.fleet.models import Gpu, Node
from app.metrics.catalog import METRICS_BY_NAME, Metric
from app.series import read as series_read
from app.series.rollups import source as rollup_source
from app.series.rollups import specs as rollup_specs
from app.series.rollups.source import source_resolution
from app.timebounds import aligns_to_wall_clock, offset_segments, wall_bucket_start

# Steps a chart can be bucketed by, seconds. The raw resolution (step 0) is used for short ranges.
NICE_STEPS_S = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
)
TARGET_POINTS = 360
#: The finest rollup: the least step of a range that reaches past the raw retention.
MINUTE_S = 60


def choose_step_s(
    start: datetime,
    end: datetime,
    *,
    target_points: int = TARGET_POINTS,
    raw_from: datetime | None = None,
) -> int:
    """Bucket width in seconds for ``[start, end]``: the smallest nice step giving at most
    ``target_points`` buckets; 0 (raw samples) when the range is 15 minutes or less. A range
    starting before ``raw_from`` (the oldest raw sample kept: now minus the raw retention)
    takes at least a minute, so it is read from the 1-minute rollups, which outlive raw rows."""
    span = (end - start).total_seconds()
    step = 0
    if span > 900:
        wanted = span / target_points
        step = next((s for s in NICE_STEPS_S if s >= wanted), NICE_STEPS_S[-1])
    if raw_from is not None and start < raw_from:
        return max(step, MINUTE_S)
    return step


@dataclass
class GpuSeries:
    """The time series of one GPU: ``times`` (UTC) and, per metric, values aligned with them
    (``None`` where the metric was not available)."""

    gpu_uuid: str
    gpu_index: int
    gpu_name: str | None
    times: list[datetime] = field(default_factory=list)
    values: dict[str, list[Any]] = field(default_factory=dict)


def node_series(
    session: Session,
    *,
    node: Node,
    metrics: list[str],
    start: datetime,
    end: datetime,
    step_s: int,
    zone: tzinfo = UTC,
) -> list[GpuSeries]:
    """Samples of every GPU of ``node`` in ``[start, end]``: :func:`node_series_from` reading
    the coarsest source that nests in ``step_s`` buckets (see :mod:`app.series.rollups.source`).

    Raises:
        KeyError: a name in ``metrics`` is not a known metric.
    """
    return node_series_from(
        session, node=node, metrics=metrics, start=start, end=end, step_s=step_s, zone=zone
    )


def node_series_from(
    session: Session,
    *,
    node: Node,
    metrics: list[str],
    start: datetime,
    end: datetime,
    step_s: int,
    zone: tzinfo = UTC,
    source_s: int | None = None,
    gpu_ids: Collection[int] | None = None,
) -> list[GpuSeries]:
    """Samples of every GPU of ``node`` in ``[start, end]``.

    With ``step_s`` 0 every stored sample is returned; otherwise samples are grouped into
    ``step_s``-wide buckets aligned on the Unix epoch, each bucket stamped with its start. Gauges
    are averaged; integer metrics (counters, bitmasks, P-states) take the bucket maximum, which is
    what an SRE looks for in them. NULLs are ignored by the aggregates, so a bucket is NULL only
    when no sample in it had the metric.

    Steps of 2 h and more follow the wall clock of ``zone`` (the viewer's time zone) instead:
    buckets start at local midnight and every ``step_s`` of wall time after it, so across a DST
    change a day bucket spans 23 or 25 hours (see :func:`app.timebounds.wall_bucket`). In UTC
    the two alignments are the same.

    ``source_s`` is the resolution read for bucketed steps: 0 raw rows, 60 or 3600 the rollups
    (with the raw rows of the window's partial edge buckets); ``None`` picks the coarsest that
    nests (:func:`app.series.rollups.source.source_resolution`). Every source gives the same values.
    ``gpu_ids`` limits the result to those GPUs of the node (all when ``None``).

    Raises:
        KeyError: a name in ``metrics`` is not a known metric.
    """
    catalog = [METRICS_BY_NAME[name] for name in metrics]
    gpus = {g.id: g for g in node.gpus if gpu_ids is None or g.id in gpu_ids}
    series = {
        gid: GpuSeries(g.uuid, g.index, g.name, values={m: [] for m in metrics})
        for gid, g in gpus.items()
    }
    rows = series_read.gpu_rows_between(
        columns=list(metrics),
        start=start,
        end=end,
        dialect=session.get_bind().dialect.name,
    )
    where = (
        rows.c.gpu_id.in_(list(gpus)),
        rows.c.sampled_at >= start,
        rows.c.sampled_at <= end,
    )
    if step_s == 0:
        stmt = (
            select(rows.c.gpu_id, rows.c.sampled_at, *(rows.c[m] for m in metrics))
            .where(*where)
            .order_by(rows.c.gpu_id, rows.c.sampled_at)
        )
        for row in session.execute(stmt):
            target = series[row[0]]
            target.times.append(row[1])
            for i, name in enumerate(metrics):
                target.values[name].append(row[2 + i])
    else:
        segments = None
        if aligns_to_wall_clock(step_s, zone):
            # Cover the whole first bucket, which may start a step (plus a DST hour) early.
            segments = offset_segments(start - timedelta(seconds=2 * step_s), end, zone)
        if source_s is None:
            source_s = source_resolution(step_s, segments)
        stmt = (
            _raw_buckets(rows, where, catalog, step_s, segments)
            if source_s == 0
            else _rollup_buckets(
                session, list(gpus), catalog, start, end, step_s, segments, source_s
            )
        )
        # Rows come ordered by GPU, then bucket: one GPU's rows are taken as columns at once.
        for gpu_id, group in itertools.groupby(session.execute(stmt).all(), key=lambda r: r[0]):
            target = series[gpu_id]
            of_gpu = list(group)
            keys = [int(r[1]) for r in of_gpu]
            target.times.extend(
                [datetime.fromtimestamp(k * step_s, UTC) for k in keys]
                if segments is None
                else [wall_bucket_start(k, step_s, segments) for k in keys]
            )
            for i, name in enumerate(metrics, start=2):
                # NaN (a float unequal to itself) → None; Decimals and ints pass as they are.
                target.values[name].extend([None if r[i] != r[i] else r[i] for r in of_gpu])
    return sorted(series.values(), key=lambda s: s.gpu_index)


def _raw_buckets(
    rows: Any,
    where: tuple[Any, ...],
    catalog: list[Metric],
    step_s: int,
    segments: list[tuple[datetime, int]] | None,
) -> Any:
    """Per (GPU, bucket) the mean of each gauge and the max of each integer metric, from raw
    rows (raw and compacted: ``rows``)."""
    epoch = epoch_s(rows.c.sampled_at)
    if segments is not None:
        epoch = epoch + _offset_at(epoch, segments)
    bucket = func.floor(epoch / step_s).label("bucket")
    aggregates = [
        (func.max(rows.c[m.name]) if m.integer else func.avg(rows.c[m.name])).label(m.name)
        for m in catalog
    ]
    return (
        select(rows.c.gpu_id, bucket, *aggregates)
        .where(*where)
        .group_by(rows.c.gpu_id, bucket)
        .order_by(rows.c.gpu_id, bucket)
    )


def _rollup_buckets(
    session: Session,
    gpu_ids: list[int],
    catalog: list[Metric],
    start: datetime,
    end: datetime,
    step_s: int,
    segments: list[tuple[datetime, int]] | None,
    source_s: int,
) -> Any:
    """The same as :func:`_raw_buckets`, from the ``source_s`` rollup: a mean is ``Σ sums ÷
    Σ counts`` of its parts, a max the max of the parts' maxima."""
    fields = [(m.name, kind) for m in catalog for kind in (("max",) if m.integer else ("sum", "n"))]
    src = rollup_source.parts(
        session,
        rollup_specs.GPU,
        resolution_s=source_s,
        start=start,
        end=end,
        where=lambda t: [t.c.gpu_id.in_(gpu_ids)],
        fields=fields,
    )
    epoch = src.c.t_s
    if segments is not None:
        epoch = epoch + _offset_at(epoch, segments)
    bucket = func.floor(epoch / step_s).label("bucket")
    aggregates = [
        (
            func.max(src.c[f"{m.name}_max"])
            if m.integer
            else func.sum(src.c[f"{m.name}_sum"]) / func.nullif(func.sum(src.c[f"{m.name}_n"]), 0)
        ).label(m.name)
        for m in catalog
    ]
    return (
        select(src.c.gpu_id, bucket, *aggregates)
        .group_by(src.c.gpu_id, bucket)
        .order_by(src.c.gpu_id, bucket)
    )


def _offset_at(epoch: Any, segments: list[tuple[datetime, int]]) -> Any:
    """SQL for the UTC offset (seconds) in force at ``epoch``: a literal, or a CASE over the
    DST changes in the range."""
    if len(segments) == 1:
        return literal(segments[0][1])
    changes = [(begin.timestamp(), offset) for begin, offset in segments]
    whens = [(epoch < nxt, offset) for (_, offset), (nxt, _) in itertools.pairwise(changes)]
    return case(*whens, else_=segments[-1][1])


def gpus_of(session: Session, *, node: Node) -> list[Gpu]:
    """The node's GPUs ordered by index."""
    return list(session.scalars(select(Gpu).where(Gpu.node_id == node.id).order_by(Gpu.index)))
