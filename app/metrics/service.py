"""Reading GPU samples over a time range, downsampled to a step chosen from the range."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import case, func, literal, select
from sqlalchemy.orm import Session

from app.db import epoch_s
from app.fleet.models import Gpu, Node
from app.metrics.catalog import METRICS_BY_NAME
from app.metrics.models import gpu_sample
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


def choose_step_s(start: datetime, end: datetime, *, target_points: int = TARGET_POINTS) -> int:
    """Bucket width in seconds for ``[start, end]``: the smallest nice step giving at most
    ``target_points`` buckets; 0 (raw samples) when the range is 15 minutes or less."""
    span = (end - start).total_seconds()
    if span <= 900:
        return 0
    wanted = span / target_points
    for step in NICE_STEPS_S:
        if step >= wanted:
            return step
    return NICE_STEPS_S[-1]


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

    Raises:
        KeyError: a name in ``metrics`` is not a known metric.
    """
    catalog = [METRICS_BY_NAME[name] for name in metrics]
    gpus = {g.id: g for g in node.gpus}
    series = {
        gid: GpuSeries(g.uuid, g.index, g.name, values={m: [] for m in metrics})
        for gid, g in gpus.items()
    }
    where = (
        gpu_sample.c.gpu_id.in_(list(gpus)),
        gpu_sample.c.sampled_at >= start,
        gpu_sample.c.sampled_at <= end,
    )
    if step_s == 0:
        stmt = (
            select(
                gpu_sample.c.gpu_id, gpu_sample.c.sampled_at, *(gpu_sample.c[m] for m in metrics)
            )
            .where(*where)
            .order_by(gpu_sample.c.gpu_id, gpu_sample.c.sampled_at)
        )
        for row in session.execute(stmt):
            target = series[row[0]]
            target.times.append(row[1])
            for i, name in enumerate(metrics):
                target.values[name].append(row[2 + i])
    else:
        epoch = epoch_s(gpu_sample.c.sampled_at)
        segments = None
        if aligns_to_wall_clock(step_s, zone):
            # Cover the whole first bucket, which may start a step (plus a DST hour) early.
            segments = offset_segments(start - timedelta(seconds=2 * step_s), end, zone)
            epoch = epoch + _offset_at(epoch, segments)
        bucket = func.floor(epoch / step_s).label("bucket")
        aggregates = [
            (func.max(gpu_sample.c[m.name]) if m.integer else func.avg(gpu_sample.c[m.name])).label(
                m.name
            )
            for m in catalog
        ]
        stmt = (
            select(gpu_sample.c.gpu_id, bucket, *aggregates)
            .where(*where)
            .group_by(gpu_sample.c.gpu_id, bucket)
            .order_by(gpu_sample.c.gpu_id, bucket)
        )
        for row in session.execute(stmt):
            target = series[row[0]]
            key = int(row[1])
            target.times.append(
                datetime.fromtimestamp(key * step_s, UTC)
                if segments is None
                else wall_bucket_start(key, step_s, segments)
            )
            for i, name in enumerate(metrics):
                value = row[2 + i]
                if value is not None and isinstance(value, float) and math.isnan(value):
                    value = None
                target.values[name].append(value)
    return sorted(series.values(), key=lambda s: s.gpu_index)


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
