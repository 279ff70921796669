"""Fleet-wide storage and InfiniBand time series for the ``/storage`` page: which nodes, and
each chart's top N series plus the summary of the rest, bucketed in SQL.

Gauges (the agent's per-interval rates and latencies of disks, NFS mounts and
IB ports) are averaged per bucket. Every query reads the minute or hour rollups
where their buckets nest, with raw rows only at the window's partial edges
(:mod:`app.series.rollups.source`); rankings and "did it move" checks over the whole window read the
hour rollups whatever the step, since a window's mean, max and min do not depend on buckets.

Counters (NFS ``retransmits``, IB port error counters) take the bucket maximum — the last
reading of a counter that only grows — and their increases between buckets follow
:mod:`app.storage.counters` (a reset or 64-bit wrap is a gap).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Subquery,
    Table,
    false,
    func,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.fleet.models import Node, in_service
from app.series.rollups import source as rollup_source
from app.series.rollups import specs as rollup_specs
from app.storage import counters
from app.storage.series import ChartData, Series, pick_top, rest_means, rest_sums

Measure = Literal["mean", "max"]
#: Windows at least this long rank their series by the whole hours that overlap them
#: (:func:`_overlapping_hours`); shorter ones by exactly the window.
RANK_BY_HOURS_FROM = timedelta(hours=6)
SeriesKey = tuple[int, str]


@dataclass(frozen=True)
class NodeScope:
    """The nodes the page shows: ``hostnames`` by node id; ``filtered`` when labels or a search
    narrowed them (otherwise no ``IN`` list is sent)."""

    hostnames: dict[int, str]
    filtered: bool

    def where(self, column: InstrumentedAttribute[int] | ColumnElement[int]) -> ColumnElement[bool]:
        """``column IN (node ids)`` when filtered, else TRUE."""
        return column.in_(list(self.hostnames)) if self.filtered else true()


def select_nodes(session: Session, *, labels: dict[str, str], search: str) -> NodeScope:
    """Nodes whose labels equal every ``labels`` item and whose hostname contains ``search``
    (case-insensitive; ``%`` and ``_`` are literal)."""
    if not labels:  # no label to compare: the JSON is not read (1,000 documents)
        plain = select(Node.id, Node.hostname).where(in_service())
        if search:
            plain = plain.where(func.lower(Node.hostname).contains(search.lower(), autoescape=True))
        return NodeScope(
            {node_id: hostname for node_id, hostname in session.execute(plain)},
            filtered=bool(search),
        )
    stmt = select(Node.id, Node.hostname, Node.labels).where(in_service())
    if search:
        stmt = stmt.where(func.lower(Node.hostname).contains(search.lower(), autoescape=True))
    hostnames = {
        node_id: hostname
        for node_id, hostname, node_labels in session.execute(stmt)
        if all((node_labels or {}).get(k) == v for k, v in labels.items())
    }
    return NodeScope(hostnames, filtered=bool(labels or search))


@dataclass(frozen=True)
class Metric:
    """A stored column charted per (node, ``keys``…) from the rollups of ``source``
    (:mod:`app.series.rollups.specs`): ``columns`` is one gauge, or the counters whose
    increases are summed (a port's five error counters)."""

    name: str
    source: rollup_specs.Spec
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    counter: bool = False


_IB_ERRORS = (
    "symbol_error_count",
    "link_downed_count",
    "link_error_recovery_count",
    "port_rcv_errors_count",
    "port_xmit_discards_count",
)
_DISK, _NFS, _NIC = rollup_specs.DISK, rollup_specs.NFS, rollup_specs.NIC
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("disk_read_bytes_per_s", _DISK, ("device",), ("read_bytes_per_s",)),
        Metric("disk_write_bytes_per_s", _DISK, ("device",), ("write_bytes_per_s",)),
        Metric("disk_avg_wait_s", _DISK, ("device",), ("avg_wait_s",)),
        Metric("nfs_read_bytes_per_s", _NFS, ("mountpoint",), ("read_bytes_per_s",)),
        Metric("nfs_write_bytes_per_s", _NFS, ("mountpoint",), ("write_bytes_per_s",)),
        Metric("nfs_avg_rtt_s", _NFS, ("mountpoint",), ("avg_rtt_s",)),
        Metric("nfs_retransmits", _NFS, ("mountpoint",), ("retransmits",), counter=True),
        Metric("ib_rx_bytes_per_s", _NIC, ("device", "port"), ("rx_bytes_per_s",)),
        Metric("ib_tx_bytes_per_s", _NIC, ("device", "port"), ("tx_bytes_per_s",)),
        Metric("ib_errors", _NIC, ("device", "port"), _IB_ERRORS, counter=True),
    )
}


@dataclass(frozen=True)
class Query:
    """One chart's query: the nodes, the window ``[start, end]`` in ``step_s`` buckets, a
    case-insensitive substring of the first key (device or mount point), and the top N."""

    scope: NodeScope
    start: datetime
    end: datetime
    step_s: int
    match: str = ""
    top_n: int = 10
    by: Measure = "mean"
    #: The resolution read (0 raw, 60, 3600); ``None`` picks the coarsest that fits.
    source_s: int | None = None


def item_label(values: Sequence[Any]) -> str:
    """The key values as one label: ``nvme0n1``, ``/home``, ``mlx5_0/1``."""
    if len(values) == 1:
        return str(values[0])
    return "/".join(map(str, values))


def _spec(metric: Metric) -> rollup_specs.Spec:
    return metric.source


def _filters(metric: Metric, q: Query) -> rollup_source.Where:
    """The scope and match filters of ``q`` for the raw table or any of its rollups."""

    def where(table: Table) -> list[ColumnElement[bool]]:
        clauses = [q.scope.where(table.c.node_id)]
        if q.match:
            first = table.c[metric.keys[0]]
            clauses.append(func.lower(first).contains(q.match.lower(), autoescape=True))
        return clauses

    return where


def _parts(
    session: Session, metric: Metric, q: Query, fields: list[tuple[str, str]], *, whole: bool
) -> Subquery:
    """Rows of ``metric``'s table over the window (:func:`app.series.rollups.source.parts`): for
    aggregates over the ``whole`` window from the coarsest rollup (every source gives the same
    sums, counts, maxima and minima), else from the coarsest that nests in ``q.step_s``
    buckets; ``q.source_s`` overrides both."""
    if q.source_s is not None:
        resolution = q.source_s
    else:
        resolution = 3600 if whole else rollup_source.source_resolution(q.step_s)
        if whole and q.end - q.start >= RANK_BY_HOURS_FROM:
            hours = _overlapping_hours(session, metric, q, fields)
            if hours is not None:
                return hours
    return rollup_source.parts(
        session,
        _spec(metric),
        resolution_s=resolution,
        start=q.start,
        end=q.end,
        where=_filters(metric, q),
        fields=fields,
        step_s=None if whole else q.step_s,
    )


def _fleet_parts(
    session: Session, metric: Metric, q: Query, fields: list[tuple[str, str]]
) -> Subquery | None:
    """Rows summing to every key's gauge ``fields`` per ``q.step_s`` bucket, from the
    fleet-wide minute sums (``<raw>_fleet_1m``: one row per minute) with raw rows at the
    window's partial minutes and after the folded-until mark; ``None`` where they do not
    apply — nodes narrowed by labels or search, a device match, buckets finer than a minute,
    a forced source, or a table without them."""
    spec = _spec(metric)
    resolution = rollup_source.source_resolution(q.step_s)
    if (
        q.scope.filtered
        or q.match
        or q.source_s is not None
        or not resolution
        or spec.fleet is None
    ):
        return None
    fleet = replace(spec, keys=(), tables={60: spec.fleet})
    return rollup_source.parts(
        session,
        fleet,
        resolution_s=60,
        start=q.start,
        end=q.end,
        where=lambda table: [],
        fields=fields,
        step_s=q.step_s,
    )


def _overlapping_hours(
    session: Session, metric: Metric, q: Query, fields: list[tuple[str, str]]
) -> Subquery | None:
    """The 1-hour rollup rows of every hour that overlaps ``[q.start, q.end]``, as far as they
    are folded, and the raw rows sampled after the folded-until mark, filtered as
    :func:`_filters`; ``None`` before the first fold.

    What a ranking over a long window reads: the partial hours at its edges count whole instead
    of being read exactly from minute and raw rows — one row per key and hour, where the exact
    edges cost up to 59 minute rows per key (480,000 rows for 1,000 nodes' IB ports) for a
    difference of at most an hour at each end. Rows sampled in the last
    :data:`~app.series.rollups.jobs.SETTLE_S` before a fold can be in both parts: they count
    twice in the ranking (never in the values drawn)."""
    spec = _spec(metric)
    horizon = rollup_specs.read_mark(session, spec.horizon_key)
    if horizon is None:
        return None
    table = spec.tables[3600]
    first = int(q.start.timestamp()) // 3600 * 3600
    hours = select(
        *(table.c[k] for k in spec.keys),
        table.c.bucket_start_s.label("t_s"),
        *(table.c[f"{name}_{kind}"] for name, kind in fields),
    ).where(
        *_filters(metric, q)(table),
        table.c.bucket_start_s >= first,
        table.c.bucket_start_s <= q.end.timestamp(),
    )
    if horizon >= q.end:
        return hours.subquery("parts")
    after = rollup_source.parts(
        session,
        spec,
        resolution_s=0,
        start=horizon,
        end=q.end,
        where=_filters(metric, q),
        fields=fields,
    )
    return union_all(hours, select(*after.c)).subquery("parts")


def _bucket(src: Subquery, step_s: int) -> Any:
    return src.c.bucket


def _bucket_time(raw: Any, step_s: int) -> datetime:
    return datetime.fromtimestamp(int(raw) * step_s, UTC)


def _mean(src: Subquery, column: str) -> Any:
    """``Σ sums ÷ Σ counts`` of a gauge's parts: the mean of its samples (NULL when none)."""
    return func.sum(src.c[f"{column}_sum"]) / func.nullif(func.sum(src.c[f"{column}_n"]), 0)


def gauge_chart(session: Session, metric: Metric, q: Query) -> ChartData:
    """The ``q.top_n`` series of ``metric`` with the highest mean (or max) over the window,
    bucket means, and the per-bucket mean of all the other series."""
    return gauge_charts(session, [metric], q)[metric.name]


Buckets = dict[datetime, tuple[float, int]]


def gauge_charts(session: Session, metrics: Sequence[Metric], q: Query) -> dict[str, ChartData]:
    """:func:`gauge_chart` of several gauges of one table (same model and keys) with three
    queries for all of them: the ranking over the whole window (from hour rollups), the top
    series' buckets, and the bucket sums and counts of every series (for the rest's mean).

    Raises:
        ValueError: the metrics are not of one table, or not gauges.
    """
    first = metrics[0]
    if any(m.source is not first.source or m.counter for m in metrics):
        raise ValueError("gauges of one table only")
    columns = [m.columns[0] for m in metrics]
    kinds = ("sum", "n") if q.by == "mean" else ("max",)
    whole = _parts(session, first, q, [(c, k) for c in columns for k in kinds], whole=True)
    keys = [whole.c[k] for k in first.keys]
    aggs = [_mean(whole, c) if q.by == "mean" else func.max(whole.c[f"{c}_max"]) for c in columns]
    measures, ranked = _top_by(session, whole, keys, aggs, q)
    tops = [pick_top(m, q.top_n) for m in measures]
    charts = {m.name: ChartData(m.name, q.start, q.end, q.step_s, []) for m in metrics}
    wanted = set().union(*tops)
    if not wanted:
        return charts
    fields = [(c, k) for c in columns for k in ("sum", "n")]
    nodes = replace(q, scope=NodeScope({k[0]: "" for k in wanted}, filtered=True))
    src = _parts(session, first, nodes, fields, whole=False)
    bucket = _bucket(src, q.step_s)
    sums = [func.sum(src.c[f"{c}_{k}"]) for c, k in fields]
    keys = [src.c[k] for k in first.keys]
    per_series: list[dict[SeriesKey, Buckets]] = [{k: {} for k in top} for top in tops]
    stmt = select(src.c.node_id, *keys, bucket, *sums).group_by(src.c.node_id, *keys, bucket)
    for row in session.execute(stmt):
        key = (row[0], item_label(row[1 : 1 + len(keys)]))
        when = _bucket_time(row[1 + len(keys)], q.step_s)
        for i, buckets in enumerate(per_series):
            total, count = row[2 + len(keys) + 2 * i], row[3 + len(keys) + 2 * i]
            if key in buckets and count:
                buckets[key][when] = (float(total), int(count))
    needs_rest = any(n > len(t) for n, t in zip(ranked, tops, strict=True))
    all_buckets: list[Buckets] = [{} for _ in metrics]
    if needs_rest:
        fleet = _fleet_parts(session, first, q, fields)
        src = fleet if fleet is not None else _parts(session, first, q, fields, whole=False)
        bucket = _bucket(src, q.step_s)
        sums = [func.sum(src.c[f"{c}_{k}"]) for c, k in fields]
        for row in session.execute(select(bucket, *sums).group_by(bucket)):
            when = _bucket_time(row[0], q.step_s)
            for i, rest_buckets in enumerate(all_buckets):
                total, count = row[1 + 2 * i], row[2 + 2 * i]
                if count:
                    rest_buckets[when] = (float(total), int(count))
    for i, metric in enumerate(metrics):
        host = q.scope.hostnames
        series = [_mean_series(host[k[0]], k[1], per_series[i][k], measures[i][k]) for k in tops[i]]
        rest_count = ranked[i] - len(tops[i])
        rest = None
        if rest_count:
            points = rest_means(all_buckets[i], list(per_series[i].values()))
            rest = Series("", "", [t for t, _ in points], [v for _, v in points])
        charts[metric.name] = ChartData(
            metric.name, q.start, q.end, q.step_s, series, rest, rest_count
        )
    return charts


def _top_by(
    session: Session, whole: Subquery, keys: list[Any], aggs: list[Any], q: Query
) -> tuple[list[dict[SeriesKey, float | None]], list[int]]:
    """Per measure of ``aggs`` (over the series of ``whole``): the ``q.top_n`` highest series
    with their measure (ties by node and key; series without a value left out), and how many
    series have one. Ranked in SQL, so 8,000 IB ports send back a top 10 and a count."""
    per_series = (
        select(whole.c.node_id, *keys, *(a.label(f"m{i}") for i, a in enumerate(aggs)))
        .group_by(whole.c.node_id, *keys)
        .subquery("per_series")
    )
    order = [per_series.c.node_id, *(per_series.c[k.key] for k in keys)]
    ranks = []
    for i in range(len(aggs)):
        value = per_series.c[f"m{i}"]
        ranks += [
            func.row_number().over(order_by=[value.desc().nulls_last(), *order]).label(f"r{i}"),
            func.count(value).over().label(f"n{i}"),
        ]
    ranked = select(*per_series.c, *ranks).subquery("ranked")
    # At least the first row, which carries the counts, even for a top 0.
    top = [ranked.c[f"r{i}"] <= max(q.top_n, 1) for i in range(len(aggs))]
    measures: list[dict[SeriesKey, float | None]] = [{} for _ in aggs]
    counts = [0] * len(aggs)
    width = 1 + len(keys)
    for row in session.execute(select(ranked).where(or_(false(), *top))):
        if row[0] not in q.scope.hostnames:
            continue
        key = (row[0], item_label(row[1:width]))
        for i in range(len(aggs)):
            value, rank, count = (
                row[width + i],
                row[width + len(aggs) + 2 * i],
                row[width + len(aggs) + 2 * i + 1],
            )
            counts[i] = count
            if value is not None and rank <= q.top_n:
                measures[i][key] = float(value)
    return measures, counts


def _mean_series(
    hostname: str, item: str, buckets: dict[datetime, tuple[float, int]], measure: float | None
) -> Series:
    times = sorted(buckets)
    values: list[float | None] = [buckets[t][0] / buckets[t][1] for t in times]
    return Series(hostname, item, times, values, measure or 0.0)


@dataclass(frozen=True)
class CounterTotal:
    """What a counter series counted in the window: ``total`` events over the intervals that
    are not gaps, and ``gaps`` (resets or wraps)."""

    hostname: str
    item: str
    total: int
    gaps: int


def counter_chart(
    session: Session, metric: Metric, q: Query
) -> tuple[ChartData, list[CounterTotal]]:
    """Per series, the increase of the summed counters between neighbouring buckets, drawn as
    events per minute at each bucket; the top N by total increase, the rest summed. Only
    series whose counters changed in the window are read. Also every changed series' total,
    highest first."""
    # Several (small, saturating) counters: one aggregate of their per-row sum instead of ten; a
    # change hides only where one counter's rise exactly cancels another's reset in the window.
    moved_field = (
        metric.columns[0]
        if len(metric.columns) == 1
        else next(f.name for f in _spec(metric).fields if f.parts == metric.columns)
    )
    extremes = [(moved_field, "max"), (moved_field, "min")]
    empty = ChartData(metric.name, q.start, q.end, q.step_s, [])
    looked_at = q
    if q.source_s is None and q.end - q.start < RANK_BY_HOURS_FROM:
        # A series that moved in the window moved in the hours around it: those (one rollup
        # row per series and hour) name the few nodes whose rows are read exactly.
        hours = _overlapping_hours(session, metric, q, extremes)
        if hours is not None:
            maybe = {k[0] for k in _moved(session, hours, metric, moved_field)}
            maybe &= set(q.scope.hostnames)
            if not maybe:
                return empty, []
            looked_at = replace(q, scope=NodeScope({n: "" for n in maybe}, filtered=True))
    whole = _parts(session, metric, looked_at, extremes, whole=True)
    changed = {k for k in _moved(session, whole, metric, moved_field) if k[0] in q.scope.hostnames}
    if not changed:
        return empty, []
    nodes = replace(q, scope=NodeScope({k[0]: "" for k in changed}, filtered=True))
    src = _parts(session, metric, nodes, [(c, "max") for c in metric.columns], whole=False)
    bucket = _bucket(src, q.step_s)
    keys = [src.c[k] for k in metric.keys]
    stmt = (
        select(src.c.node_id, *keys, bucket, *(func.max(src.c[f"{c}_max"]) for c in metric.columns))
        .group_by(src.c.node_id, *keys, bucket)
        .order_by(src.c.node_id, *keys, bucket)
    )
    width = len(metric.columns)
    readings: dict[SeriesKey, list[tuple[datetime, list[int | None]]]] = defaultdict(list)
    for row in session.execute(stmt):
        key = (row[0], item_label(row[1 : 1 + len(keys)]))
        if key in changed:
            when = _bucket_time(row[1 + len(keys)], q.step_s)
            readings[key].append((when, [None if v is None else int(v) for v in row[-width:]]))
    built = {k: _counter_series(q.scope.hostnames[k[0]], k[1], r) for k, r in readings.items()}
    totals = sorted((t for _, t in built.values()), key=lambda t: (-t.total, t.hostname, t.item))
    top = pick_top({k: s.measure for k, (s, _) in built.items()}, q.top_n)
    others = [s for k, (s, _) in built.items() if k not in set(top)]
    rest = None
    if others:
        points = rest_sums(others)
        rest = Series("", "", [t for t, _ in points], [v for _, v in points])
    chart = ChartData(
        metric.name, q.start, q.end, q.step_s, [built[k][0] for k in top], rest, len(others)
    )
    return chart, totals


def _moved(session: Session, parts: Subquery, metric: Metric, field: str) -> set[SeriesKey]:
    """The series of ``parts`` whose ``field`` (its ``_max`` and ``_min`` parts) is not the
    same over all their rows."""
    keys = [parts.c[k] for k in metric.keys]
    moved = or_(func.max(parts.c[f"{field}_max"]) != func.min(parts.c[f"{field}_min"]), false())
    stmt = select(parts.c.node_id, *keys).group_by(parts.c.node_id, *keys).having(moved)
    return {(r[0], item_label(r[1:])) for r in session.execute(stmt)}


def _counter_series(
    hostname: str, item: str, readings: list[tuple[datetime, list[int | None]]]
) -> tuple[Series, CounterTotal]:
    width = len(readings[0][1])
    per_counter = [counters.increases([(t, vals[i]) for t, vals in readings]) for i in range(width)]
    summed = counters.summed_increases(per_counter)
    values = [None if i.per_s is None else i.per_s * 60.0 for i in summed]
    total = counters.total(summed)
    series = Series(hostname, item, [i.end for i in summed], values, float(total))
    return series, CounterTotal(hostname, item, total, counters.gaps(summed))
