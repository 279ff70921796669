"""Every GPU's recent raw samples in memory, for the alert rules' short windows: read whole once,
then only what the ingest stored since (:mod:`app.series.arrivals`), and aggregated with numpy.

At 1,000 nodes × 8 GPUs the widest rule window of 10 min is 480,000 raw rows; scanning and
grouping them in Postgres every 10-s tick took ~1 s, turning the groups into Python ~0.3 s. Here
a tick reads the ~8,000 rows that arrived (packed into one row of byte strings), merges them,
and computes every window's count, avg, min and max for every GPU from prefix sums over the rows
sorted newest first (one pass per metric for all windows).

Layout: per metric a (GPUs × slots) float64 array (NaN: no value), and a (GPUs × slots) int64
array of ``sampled_at`` in µs since the epoch; in each GPU's row the times decrease strictly,
with :data:`EMPTY` holes (NaN values) where a tick brought it fewer samples than others (packed
away when they outnumber the samples). A row re-read (feed ranges overlap, a take rolled back)
is dropped as a duplicate of its ``(gpu, sampled_at)``; rows older than the span before their
GPU's newest are cut off. Memory: 8 bytes × (metrics + 1) × samples held, ~40 MB at 1,000
nodes, 10 metrics and 10-min windows of 10-s samples.

Values are exact as stored: integer counters up to 2⁵³ as float64, as the SQL aggregates cast
them; a window holds the samples with ``sampled_at ≥ end − window`` (µs, exact on both
backends), ``end`` being the node's newest sample, as :mod:`app.series.rule_windows` defines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Float, and_, cast, func, literal, literal_column, select, true
from sqlalchemy.orm import Session

from app.db import epoch_s
from app.fleet.models import Gpu, Node
from app.series import arrivals
from app.series.tables import gpu_sample

#: The widest window kept in memory; a rule's wider GPU window is scanned in the database.
MAX_SPAN_S = 900.0
#: A whole load reads by one range scan of time the nodes whose newest sample is at most this
#: far behind the fleet's median newest (seconds); the others by primary key per GPU.
RANGE_SLACK_S = 60.0
#: A reader loads whole again after this long, so GPUs gone from the fleet leave its memory.
RELOAD_EVERY_S = 6 * 3600.0
#: Pads a GPU's row of sample times past its last sample.
EMPTY = np.iinfo(np.int64).min
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Postgres sends a timestamptz as µs since 2000-01-01 (PostgreSQL "Date/Time Types").
_PG_EPOCH_US = 946_684_800_000_000
SERIES = gpu_sample.name
#: A metric: its SQL expression over ``gpu_sample`` (or an alias of it).
MetricExpr = Callable[[Any], Any]
Need = tuple[str, str]  # (metric, aggregation: avg | min | max)


def to_us(when: datetime) -> int:
    """``when`` (timezone-aware) in µs since the epoch, exactly."""
    return (when - EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Windows:
    """Aggregates of one window for the GPUs asked: ``present[i]`` when GPU ``i`` has a sample
    in the window; per need an array of values (NaN: none)."""

    present: np.ndarray
    values: dict[Need, np.ndarray]


class RecentGpuSamples:
    """Each GPU's raw samples within ``span_s`` of its newest, for the metrics asked.

    ``consume_feed``: read what arrived from :mod:`app.series.arrivals` between refreshes (the
    alert leader's own instance, Postgres); otherwise every refresh reloads whole.
    """

    def __init__(self, *, consume_feed: bool = False) -> None:
        self.consume_feed = consume_feed
        self.loads = 0  # whole reloads, for tests and the benchmark
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next refresh reloads whole."""
        self._metrics: tuple[str, ...] = ()
        self._exprs: list[MetricExpr] = []
        self._span_us = 0
        self._row_of: dict[int, int] = {}
        self._times = np.full((0, 0), EMPTY, dtype=np.int64)
        self._values = np.full((0, 0, 0), np.nan)
        self._taken_at: float | None = None
        self._loaded_at: float | None = None

    @property
    def samples(self) -> int:
        """How many samples are held."""
        return int((self._times != EMPTY).sum())

    def refresh(
        self,
        session: Session,
        *,
        metrics: Mapping[str, MetricExpr],
        span_s: float,
        node_ids: Collection[int] | None = None,
    ) -> None:
        """Bring the samples up to date with what ``session`` sees, for ``metrics`` and windows
        up to ``span_s``: what arrived since the last refresh, or everything (of ``node_ids``
        only, when given, which a feed reader never is) when this holds other metrics or a
        shorter span, was never loaded, last read the feed over ``KEEP_S / 2`` ago, or loaded
        whole over :data:`RELOAD_EVERY_S` ago (so GPUs gone from the fleet are forgotten).

        On any error the samples are forgotten (the next refresh reloads) and it is raised.
        """
        names = tuple(sorted(metrics))
        span_us = round(span_s * 1_000_000)
        clock = time.monotonic()
        stale = (
            self._taken_at is None
            or self._loaded_at is None
            or clock - self._taken_at > arrivals.KEEP_S / 2
            or clock - self._loaded_at > RELOAD_EVERY_S
        )
        whole = (
            not self.consume_feed
            or stale
            or not set(names) <= set(self._metrics)
            or span_us > self._span_us
        )
        try:
            if whole:
                if self.consume_feed:
                    arrivals.clear(session, series=SERIES)
                self.reset()
                self._metrics, self._span_us = names, span_us
                self._exprs = [metrics[m] for m in names]
                self._values = np.full((len(names), 0, 0), np.nan)
                gpu_ids, times, values = _read_whole(session, self._exprs, span_us, node_ids)
                self.loads += 1
                self._loaded_at = clock
            else:
                gpu_ids, times, values = _read_arrived(session, self._exprs, self._span_us)
            self._merge(gpu_ids, times, values)
            self._taken_at = time.monotonic()
        except BaseException:
            self.reset()
            raise

    def release(self, session: Session) -> None:
        """No rule needs the samples now: forget them, and empty the feed (a reader) so it
        does not grow until retention; the next refresh reloads."""
        if self.consume_feed:
            arrivals.clear(session, series=SERIES)
        self.reset()

    def windows(
        self,
        gpu_ids: Sequence[int],
        owners: Sequence[int],
        ends: Sequence[datetime],
        slots: Sequence[tuple[float, Sequence[Need]]],
    ) -> list[Windows]:
        """Per slot ``(window seconds, needs)``: the aggregates over each GPU's samples with
        ``sampled_at ≥ end − window``; ``owners`` (node ids) and ``ends`` (the node's newest
        sample as the caller read it) given per GPU.

        A window ends at the later of ``end`` and the owner's newest sample held: a batch
        committed after the caller read ``end`` (Postgres reads each statement's own snapshot)
        is then in every window of its node, as if both were read together, never in a window
        that ends before it.

        ``avg`` is the sum of the values present over their count; ``min``/``max`` of the
        values present; NaN when the window has samples but no value.

        Raises:
            ValueError: a metric that was not refreshed.
        """
        n = len(gpu_ids)
        rows, known, times, end_us = self._gathered(gpu_ids, owners, ends)
        width = times.shape[1]
        held = times != EMPTY
        spans = []  # per slot: (present, the length of the prefix holding the window)
        for window_s, _ in slots:
            cutoff = (end_us - round(window_s * 1_000_000))[:, None]
            older = held & (times < cutoff)
            first_older = (
                np.where(older.any(axis=1), older.argmax(axis=1), width)
                if width
                else np.zeros(n, dtype=np.int64)
            )
            spans.append((np.asarray((times >= cutoff).any(axis=1)), first_older))
        out = [Windows(present, {}) for present, _ in spans]
        wanted = sorted({m for _, needs in slots for m, _ in needs})
        for metric in wanted:
            column = self._metrics.index(metric)
            values = np.full((n, width), np.nan)
            values[known] = self._values[column][rows[known]]
            prefix = _Prefix(values)
            for (_, needs), (_, length), result in zip(slots, spans, out, strict=True):
                for need in needs:
                    if need[0] == metric:
                        result.values[need] = prefix.of(need[1], length)
        return out

    def latest(
        self,
        gpu_ids: Sequence[int],
        owners: Sequence[int],
        ends: Sequence[datetime],
        within_s: float,
        metrics: Sequence[str],
    ) -> Windows:
        """Each GPU's newest sample held, when within ``within_s`` of its window end (as
        :meth:`windows` ends them: the later of ``end`` and its owner's newest sample held):
        ``present[i]`` then, and per ``(metric, "last")`` its value (NaN: none). What
        ``app.series.rule_scans.gpu_latest`` reads by primary key, from memory.

        Raises:
            ValueError: a metric that was not refreshed.
        """
        n = len(gpu_ids)
        rows, known, times, end_us = self._gathered(gpu_ids, owners, ends)
        if n == 0 or times.shape[1] == 0:
            empty = np.full(n, np.nan)
            return Windows(np.zeros(n, dtype=bool), {(m, "last"): empty for m in metrics})
        at = times.argmax(axis=1)  # the newest: rows hold times newest first, holes anywhere
        newest = times[np.arange(n), at]
        present = (newest != EMPTY) & (newest >= end_us - round(within_s * 1_000_000))
        values: dict[Need, np.ndarray] = {}
        for metric in metrics:
            column = self._values[self._metrics.index(metric)]
            got = np.full(n, np.nan)
            got[known] = column[rows[known], at[known]]
            values[(metric, "last")] = got
        return Windows(present, values)

    def _gathered(
        self, gpu_ids: Sequence[int], owners: Sequence[int], ends: Sequence[datetime]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For the GPUs asked: their rows (−1: none held), which are held, their sample times
        (GPUs × width, :data:`EMPTY` where none) and their window ends in µs (the later of
        ``end`` and the owner's newest sample held)."""
        n = len(gpu_ids)
        rows = np.fromiter((self._row_of.get(g, -1) for g in gpu_ids), dtype=np.int64, count=n)
        known = rows >= 0
        width = self._times.shape[1]
        times = np.full((n, width), EMPTY, dtype=np.int64)
        times[known] = self._times[rows[known]]
        end_us = np.fromiter((to_us(e) for e in ends), dtype=np.int64, count=n)
        if n and width:
            _, owner = np.unique(np.asarray(owners, dtype=np.int64), return_inverse=True)
            newest = np.full(int(owner.max()) + 1, EMPTY, dtype=np.int64)
            np.maximum.at(newest, owner, times.max(axis=1))
            end_us = np.maximum(end_us, newest[owner])
        return rows, known, times, end_us

    def _merge(self, gpu_ids: np.ndarray, times: np.ndarray, values: np.ndarray) -> None:
        """Add samples (``values``: metrics × samples), drop repeats and those past the span.

        Each GPU's row keeps its times strictly decreasing, with :data:`EMPTY` holes (NaN
        values) anywhere. New samples all newer than their GPU's newest held (a live fleet's
        tick) go in front of the rows, one copy of the arrays; anything else (a late or
        repeated sample, too many holes) sorts every row again."""
        if len(gpu_ids) == 0:
            return
        for gpu_id in np.unique(gpu_ids).tolist():
            if gpu_id not in self._row_of:
                self._row_of[gpu_id] = len(self._row_of)
        gpus = len(self._row_of)
        rows = np.fromiter((self._row_of[g] for g in gpu_ids.tolist()), np.int64, len(gpu_ids))
        order = np.lexsort((-times, rows))  # per GPU, newest first
        rows, times, values = rows[order], times[order], values[:, order]
        repeat = np.zeros(len(rows), dtype=bool)
        repeat[1:] = (rows[1:] == rows[:-1]) & (times[1:] == times[:-1])
        if repeat.any():
            rows, times, values = rows[~repeat], times[~repeat], values[:, ~repeat]
        first = np.searchsorted(rows, rows, side="left")
        rank = np.arange(len(rows)) - first
        old_gpus, old_width = self._times.shape
        new_times = np.full((gpus, int(rank.max()) + 1), EMPTY, dtype=np.int64)
        new_values = np.full((len(self._metrics), *new_times.shape), np.nan)
        new_times[rows, rank] = times
        new_values[:, rows, rank] = values
        old_times, old_values = self._times, self._values
        if gpus > old_gpus:
            grow = gpus - old_gpus
            old_times = np.concatenate([old_times, np.full((grow, old_width), EMPTY)], axis=0)
            pad = np.full((len(self._metrics), grow, old_width), np.nan)
            old_values = np.concatenate([old_values, pad], axis=1)
        held_newest = old_times.max(axis=1, initial=EMPTY)
        last_of_gpu = np.r_[first[1:] != first[:-1], True]  # each GPU's oldest new sample
        in_order = bool((times[last_of_gpu] > held_newest[rows[last_of_gpu]]).all())
        all_times = np.concatenate([new_times, old_times], axis=1)
        all_values = np.concatenate([new_values, old_values], axis=2)
        if not in_order:
            all_times, all_values = _sorted_unique(all_times, all_values)
        newest = all_times.max(axis=1)
        cut = np.where(newest == EMPTY, np.iinfo(np.int64).max, newest - self._span_us)
        keep = all_times >= cut[:, None]
        last = np.where(keep.any(axis=1), keep.shape[1] - keep[:, ::-1].argmax(axis=1), 0)
        width, held = int(last.max(initial=0)), int(keep.sum(axis=1).max(initial=0))
        if width > 2 * held + 8:  # mostly holes: pack the rows
            all_times[~keep] = EMPTY
            all_values[:, ~keep] = np.nan
            all_times, all_values = _sorted_unique(all_times, all_values)
            width = held
        # Views, not contiguous copies: the next merge copies them anyway, and a copy here of
        # ~40 MB of values at 1,000 nodes was a second one every tick.
        self._times = all_times[:, :width]
        self._values = all_values[:, :, :width]


class _Prefix:
    """Prefix aggregates over each row of ``values`` (rows newest first): the aggregate of a
    window within the first ``length`` entries is the prefix's at ``length − 1``."""

    def __init__(self, values: np.ndarray) -> None:
        valid = ~np.isnan(values)
        self.n = np.cumsum(valid, axis=1)
        self._values, self._valid = values, valid
        self._cache: dict[str, np.ndarray] = {}

    def _prefix(self, aggregation: str) -> np.ndarray:
        if aggregation not in self._cache:
            v, ok = self._values, self._valid
            self._cache[aggregation] = {
                "avg": lambda: np.cumsum(np.where(ok, v, 0.0), axis=1),
                "min": lambda: np.minimum.accumulate(np.where(ok, v, np.inf), axis=1),
                "max": lambda: np.maximum.accumulate(np.where(ok, v, -np.inf), axis=1),
            }[aggregation]()
        return self._cache[aggregation]

    def of(self, aggregation: str, length: np.ndarray) -> np.ndarray:
        """The aggregate per row over its first ``length`` entries (holes hold no value; NaN:
        no value among them).

        Raises:
            KeyError: an aggregation other than avg, min, max."""
        if self.n.shape[1] == 0:
            return np.full(len(length), np.nan)
        at = np.maximum(length - 1, 0)
        each = np.arange(len(length))
        n = np.where(length > 0, self.n[each, at], 0)
        got = self._prefix(aggregation)[each, at]
        if aggregation == "avg":
            with np.errstate(invalid="ignore", divide="ignore"):
                got = got / n
        return np.where(n > 0, got, np.nan)


def _newest_first(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row sorted by time, newest first, :data:`EMPTY` last."""
    order = np.argsort(times, axis=1, kind="stable")[:, ::-1]
    sorted_values = np.take_along_axis(values, order[None, :, :], axis=2)
    return np.take_along_axis(times, order, axis=1), sorted_values


def _sorted_unique(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row newest first without repeated times (a sample read twice is one sample: the
    first stored wins in the table, so both copies hold the same values) and no holes."""
    times, values = _newest_first(times, values)
    repeat = np.zeros_like(times, dtype=bool)
    repeat[:, 1:] = (times[:, 1:] == times[:, :-1]) & (times[:, 1:] != EMPTY)
    if repeat.any():
        times[repeat] = EMPTY
        values[:, repeat] = np.nan
        times, values = _newest_first(times, values)
    return times, values


def _columns(exprs: Sequence[MetricExpr], t: Any, postgres: bool) -> list[Any]:
    if postgres:
        nan: Any = literal_column("'NaN'::float8")
        return [
            t.c.gpu_id.label("g"),
            t.c.sampled_at.label("t"),
            *(func.coalesce(cast(e(t), Float), nan).label(f"m{i}") for i, e in enumerate(exprs)),
        ]
    return [t.c.gpu_id, t.c.sampled_at, *(cast(e(t), Float) for e in exprs)]


def _read_whole(
    session: Session,
    exprs: Sequence[MetricExpr],
    span_us: int,
    node_ids: Collection[int] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every GPU's samples within ``span_us`` of its node's newest (of ``node_ids``)."""
    t = gpu_sample
    postgres = session.get_bind().dialect.name == "postgresql"
    ends = select(func.min(Node.last_sample_at))
    if node_ids is not None:
        ends = ends.where(Node.id.in_(sorted(node_ids)))
    earliest = session.scalar(ends)
    if earliest is None:
        return _empty(len(exprs))
    span = timedelta(microseconds=span_us)
    if postgres:
        return _read_whole_pg(session, exprs, span, node_ids)
    # seconds as floats: a second wider, the exact bound is the windows'
    per_node = epoch_s(t.c.sampled_at) >= epoch_s(Node.last_sample_at) - span_us / 1e6 - 1
    stmt = (
        select(*_columns(exprs, t, postgres))
        .select_from(t.join(Gpu, Gpu.id == t.c.gpu_id).join(Node, Node.id == Gpu.node_id))
        .where(t.c.sampled_at >= earliest - span - timedelta(seconds=1), per_node)
    )
    if node_ids is not None:
        stmt = stmt.where(Node.id.in_(sorted(node_ids)))
    return _from_rows(session.execute(stmt).all(), len(exprs))


def _read_whole_pg(
    session: Session,
    exprs: Sequence[MetricExpr],
    span: timedelta,
    node_ids: Collection[int] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_read_whole` on Postgres.

    The whole fleet (``node_ids`` None): one range scan of the samples' time index from the
    fleet's median newest sample minus ``span`` and :data:`RANGE_SLACK_S`, in two halves of
    that time range read at once on two connections (the rows of the last minutes lie in
    adjacent pages; the 464,000 samples of 1,000 nodes took ~0.4 s on one connection, against
    ~0.7 s by primary key per GPU). Nodes whose newest sample is further behind (a late
    batch, a skewed clock) are read by primary key: :func:`_by_gpu`. Samples older than a
    GPU's span are trimmed when merged.

    Some nodes (a node-scoped evaluation): :func:`_by_gpu` of their GPUs."""
    metrics = len(exprs)
    if node_ids is not None:
        return _packed(session, _by_gpu(exprs, span).where(Node.id.in_(sorted(node_ids))), metrics)
    newest: list[tuple[int, datetime]] = [
        (node, at)
        for node, at in session.execute(select(Node.id, Node.last_sample_at))
        if at is not None
    ]
    if not newest:
        return _empty(metrics)
    ordered = sorted(at for _, at in newest)
    median = ordered[len(ordered) // 2]
    lower = median - span - timedelta(seconds=RANGE_SLACK_S)
    behind = sorted(node for node, at in newest if at - span < lower)
    middle = lower + (median - lower) / 2
    t = gpu_sample
    columns = _columns(exprs, t, True)
    # Bounds as literals: a bound parameter of a statement psycopg prepares could get a
    # generic plan, a third of the table by its estimate, and so a sequential scan.
    older = select(*columns).where(
        t.c.sampled_at >= _moment(lower), t.c.sampled_at < _moment(middle)
    )
    newer = select(*columns).where(t.c.sampled_at >= _moment(middle))
    statements = [older, newer]
    if behind:
        statements.append(_by_gpu(exprs, span).where(Node.id.in_(behind)))
    return _packed_together(session, statements, metrics)


def _moment(when: datetime) -> Any:
    """``when`` as a ``timestamptz`` literal in the statement's text."""
    return literal_column(f"CAST('{when.astimezone(UTC).isoformat()}' AS timestamptz)")


def _by_gpu(exprs: Sequence[MetricExpr], span: timedelta) -> Any:
    """Per GPU one range scan of its primary key ``(gpu_id, sampled_at)`` from its node's
    newest sample minus ``span``, forced by ``LATERAL``. Written as a join, the planner could
    loop over the nodes with a range scan of every GPU's samples by time each (its estimate of
    one such scan: 1,625 rows; in fact 490,000), which held a whole load at 1,000 nodes for
    minutes instead of a second."""
    t = gpu_sample
    per_gpu = (
        select(*_columns(exprs, t, True))
        .where(t.c.gpu_id == Gpu.id, t.c.sampled_at >= Node.last_sample_at - literal(span))
        .lateral("per_gpu")
    )
    return (
        select(*per_gpu.c)
        .select_from(Gpu)
        .join(Node, Node.id == Gpu.node_id)
        .join(per_gpu, true())
        .where(Node.last_sample_at.is_not(None))
    )


def _packed_together(
    session: Session, statements: Sequence[Any], metrics: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_packed` of the first of ``statements`` on a second connection while the others
    run in ``session``, concatenated. The second connection reads its own snapshot, a moment
    later at most; a sample it sees that the feed also brings later is dropped as a repeat
    when merged."""
    engine = session.get_bind().engine

    def first() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with Session(engine) as other:
            return _packed(other, statements[0], metrics)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="recent-gpu-load") as pool:
        aside = pool.submit(first)
        parts = [_packed(session, stmt, metrics) for stmt in statements[1:]]
        parts.insert(0, aside.result())
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts], axis=1),
    )


def _read_arrived(
    session: Session, exprs: Sequence[MetricExpr], span_us: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The samples of every feed row taken now (Postgres), within the span before the row's
    newest (older ones lie outside every window)."""
    t = gpu_sample
    taken = arrivals.taken_cte(SERIES)
    span = timedelta(microseconds=span_us)
    on = and_(
        t.c.gpu_id == taken.c.owner_id,
        t.c.sampled_at >= taken.c.first_at,
        t.c.sampled_at <= taken.c.last_at,
        t.c.sampled_at >= taken.c.last_at - literal(span),
    )
    stmt = select(*_columns(exprs, t, True)).select_from(t.join(taken, on))
    return _packed(session, stmt, len(exprs))


def _empty(metrics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((metrics, 0))


def _from_rows(rows: Sequence[Any], metrics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not rows:
        return _empty(metrics)
    gpu_ids = np.array([r[0] for r in rows], dtype=np.int64)
    times = np.array([to_us(r[1]) for r in rows], dtype=np.int64)
    values = np.array([r[2:] for r in rows], dtype=float).reshape(len(rows), metrics).T
    return gpu_ids, times, np.ascontiguousarray(values)


def _fetch_binary(session: Session, stmt: Any) -> Any:
    """The first row of ``stmt`` run in ``session``'s transaction with results in binary
    (Postgres): a ``bytea`` in text form is hex, twice its size to send and to decode (~0.2 s
    of a whole load's 40 MB at 1,000 nodes)."""
    conn = session.connection()
    compiled = stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor(binary=True) as cursor:
        cursor.execute(str(compiled), compiled.params)
        return cursor.fetchone()


def _packed(session: Session, stmt: Any, metrics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows of ``stmt`` (``g`` gpu id int4, ``t`` timestamptz, ``m0``… float8, none NULL)
    as one row of one ``bytea`` per column, each the column's values in their binary send
    form concatenated in one pass (``string_agg``: every aggregate of a query sees the rows in
    the same order), unpacked with numpy. A row per sample through the driver, or a binary
    ``COPY`` (one protocol message per row), spent more time in Python than Postgres spent
    reading (0.9 s for 464,000 samples, 0.55 s this way)."""
    rows = stmt.subquery("q")
    empty: Any = literal_column("''::bytea")
    packed = select(
        func.string_agg(func.int4send(rows.c.g), empty),
        func.string_agg(func.timestamptz_send(rows.c.t), empty),
        *(func.string_agg(func.float8send(rows.c[f"m{m}"]), empty) for m in range(metrics)),
    )
    got = _fetch_binary(session, packed)
    if got is None or got[0] is None:
        return _empty(metrics)
    gpu_ids = np.frombuffer(got[0], dtype=">i4").astype(np.int64)
    times = np.frombuffer(got[1], dtype=">i8").astype(np.int64) + _PG_EPOCH_US
    values = np.empty((metrics, len(gpu_ids)))
    for m in range(metrics):
        values[m] = np.frombuffer(got[2 + m], dtype=">f8")
    return gpu_ids, times, values
