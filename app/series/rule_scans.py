"""The fleet-wide statements behind the alert evaluator's shared aggregates
(:mod:`app.alerts.kinds.shared`), each returning one row per entity (never histories):

* every window of a target in **one** scan of its widest window: per window a row count and
  each aggregate over ``CASE WHEN sampled_at within the window THEN value END`` (NULLs are
  ignored by AVG/MIN/MAX, so each equals the aggregate over that window's rows alone); an
  entity with no row inside a window is left out of that window, as a scan of it alone would;
* a GPU's newest sample by primary-key lookup on ``(gpu_id, gpu.last_sample_at)`` (the ingest
  keeps ``gpu.last_sample_at`` the newest stored ``sampled_at``), not a window scan;
* a GPU counter's rise: the window's oldest sample found per GPU by one index probe
  (``ORDER BY sampled_at LIMIT 1`` on the ``(gpu_id, sampled_at)`` key), the newest by
  ``gpu.last_sample_at``;
* a host entity's current reading (:mod:`app.series.latest`), and its counters' rise over a
  window (oldest and newest rows per entity).

Windows end at each node's newest sample (``node.last_sample_at``, agent clock) as in
:func:`app.series.rule_windows.windowed`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import Float, and_, case, cast, func, literal, select

from app.db import epoch_s
from app.fleet.models import Gpu, Node
from app.series import latest
from app.series.rule_targets import TARGETS
from app.series.rule_windows import RuleFleet, earliest_newest, entity_columns, windowed, within
from app.series.writes import LATEST_WINDOW_S

Slot = tuple[str, str, float]  # (target, mode, window seconds)
Need = tuple[str, str]  # (metric, aggregation)
EntityKey = tuple[Any, ...]
Values = dict[Need, dict[EntityKey, float | None]]
AGGREGATES: dict[str, Callable[[Any], Any]] = {
    "avg": func.avg,
    "min": func.min,
    "max": func.max,
}


def windows(ctx: RuleFleet, target_name: str, group: dict[Slot, list[Need]]) -> dict[Slot, Values]:
    """Every ``(metric, aggregation)`` of every window slot in ``group`` (all of one target),
    per entity of every fresh node, from one scan of the widest window in three steps:

    1. each row gets the index of the narrowest window holding it (``wi``) and each metric
       once, in a subquery;
    2. rows are grouped per entity and ``wi`` with plain aggregates (count of rows; per metric
       the sum and count of values for ``avg``, ``min``, ``max``): one pass over the raw rows
       without a per-window ``CASE`` in every aggregate;
    3. those few rows per entity are combined per window (``wi`` ≤ i), one row per entity.

    ``avg`` is the sum of the values over their count, as ``AVG`` computes it; an entity with
    no row inside a window is left out of that window, as a scan of it alone would."""
    target = TARGETS[target_name]
    t = target.table
    keys = entity_columns(target)
    width = len(keys)
    layout = sorted(group.items())
    metrics = sorted({m for _, needs in layout for m, _ in needs})
    narrowest = case(
        *(
            (within(ctx, t.c.sampled_at, Node.last_sample_at, slot[2]), i)
            for i, (slot, _) in enumerate(layout)
        ),
        else_=len(layout) - 1,
    )
    inner = windowed(
        ctx,
        target,
        None,
        max(slot[2] for slot in group),
        *(k.label(f"k{i}") for i, k in enumerate(keys)),
        narrowest.label("wi"),
        *(target.metrics[m](t).label(f"m{j}") for j, m in enumerate(metrics)),
    )
    out: dict[Slot, Values] = {slot: {n: {} for n in needs} for slot, needs in layout}
    if inner is None:
        return out
    # OFFSET 0 keeps Postgres from inlining the subquery, which would compute the window
    # index (and the metric expressions) again in the aggregates instead of once per row.
    rows_in = inner.offset(0).subquery("rows_in")
    owners = [rows_in.c[f"k{i}"] for i in range(width)]
    wanted = sorted({(m, agg) for _, needs in layout for m, agg in needs})
    partial: list[Any] = [func.count().label("c")]
    for m, agg in wanted:
        j = metrics.index(m)
        value = rows_in.c[f"m{j}"]
        if agg == "avg":
            partial += [func.sum(value).label(f"s{j}"), func.count(value).label(f"n{j}")]
        else:
            partial.append(AGGREGATES[agg](value).label(f"{agg}{j}"))
    grouped = (
        select(*owners, rows_in.c.wi, *partial)
        .group_by(*owners, rows_in.c.wi)
        .offset(0)
        .subquery("per_wi")
    )
    g = grouped.c
    columns: list[Any] = []
    for i, (_, needs) in enumerate(layout):
        inside = g.wi <= i
        columns.append(func.sum(case((inside, g.c), else_=0)))
        for m, agg in needs:
            j = metrics.index(m)
            if agg == "avg":
                total = cast(func.sum(case((inside, g[f"s{j}"]))), Float)
                count = cast(func.sum(case((inside, g[f"n{j}"]))), Float)
                columns.append(total / func.nullif(count, 0))
            else:
                columns.append(AGGREGATES[agg](case((inside, g[f"{agg}{j}"]))))
    parts = [g[f"k{i}"] for i in range(width)]
    rows = ctx.session.execute(select(*parts, *columns).group_by(*parts)).all()
    if not rows:
        return out
    # Column by column (one transpose in C, one comprehension per column): row by row, 8,000
    # GPUs × ~100 columns were ~0.8 s of an evaluation at 1,000 nodes.
    by_column = list(zip(*rows, strict=True))
    entities = list(zip(*by_column[:width], strict=True))
    i = width
    for slot, needs in layout:
        present = by_column[i]
        for k, need in enumerate(needs):
            out[slot][need] = {
                key: None if value is None else float(value)
                for key, seen, value in zip(entities, present, by_column[i + 1 + k], strict=True)
                if seen
            }
        i += 1 + len(needs)
    return out


def _fresh_gpus(ctx: RuleFleet, window_s: float, *columns: Any) -> Any:
    """``SELECT columns`` over GPUs joined to their node, for fresh nodes whose GPU's newest
    sample lies within ``window_s`` of the node's newest; None when no node is fresh."""
    node_ids = ctx.fresh_node_ids
    if earliest_newest(ctx, node_ids) is None:
        return None
    stmt = select(*columns).select_from(Gpu).join(Node, Node.id == Gpu.node_id)
    stmt = stmt.where(within(ctx, Gpu.last_sample_at, Node.last_sample_at, window_s))
    if ctx.only_nodes is not None or len(node_ids) < len(ctx.nodes):
        stmt = stmt.where(Node.id.in_(sorted(node_ids)))
    return stmt


def gpu_latest(ctx: RuleFleet, window_s: float, metrics: list[str]) -> list[Any]:
    """Rows ``(gpu_id, node_id, *metric values)`` of each GPU's newest sample, for GPUs whose
    newest sample is within ``window_s`` of their node's newest."""
    t = TARGETS["gpu"].table
    exprs = [TARGETS["gpu"].metrics[m](t) for m in metrics]
    stmt = _fresh_gpus(ctx, window_s, Gpu.id, Gpu.node_id, *exprs)
    if stmt is None:
        return []
    on = and_(t.c.gpu_id == Gpu.id, t.c.sampled_at == Gpu.last_sample_at)
    return list(ctx.session.execute(stmt.join(t, on)).all())


def gpu_rates(ctx: RuleFleet, window_s: float, metrics: list[str]) -> list[Any]:
    """Rows ``(gpu_id, node_id, *rates)``: per GPU counter, (value at the newest sample −
    value at the oldest sample within the window) ÷ seconds between them; None for one sample,
    a missing value or a reset (the value went down).

    On Postgres the oldest sample is one ``LATERAL`` probe per GPU returning its values too: a
    scalar subquery for its time was inlined by the planner into every rate's expression (five
    index probes per GPU, ~0.25 s a tick at 8,000 GPUs), and with it out of line the planner
    took a sequential scan for the join back to its values."""
    t = TARGETS["gpu"].table
    first = t.alias("s0")
    lower = earliest_newest(ctx, ctx.fresh_node_ids)
    if lower is None:
        return []
    in_window = (
        first.c.gpu_id == Gpu.id,
        # The index range starts at the fleet's earliest window start (without it each
        # probe walked the GPU's rows from the oldest kept); the per-node bound is exact.
        first.c.sampled_at >= lower - timedelta(seconds=window_s),
        within(ctx, first.c.sampled_at, Node.last_sample_at, window_s),
    )
    if ctx.session.get_bind().dialect.name == "postgresql":
        return _gpu_rates_lateral(ctx, window_s, metrics, first, in_window)
    oldest = (
        select(first.c.sampled_at)
        .where(*in_window)
        .order_by(first.c.sampled_at)
        .limit(1)
        .scalar_subquery()
    )
    span_stmt = _fresh_gpus(
        ctx,
        window_s,
        Gpu.id.label("gpu_id"),
        Gpu.node_id.label("node_id"),
        oldest.label("t0"),
        Gpu.last_sample_at.label("t1"),
    )
    if span_stmt is None:
        return []
    span = span_stmt.subquery("span")
    v0s, v1s = t.alias("v0"), t.alias("v1")
    stmt = select(
        span.c.gpu_id,
        span.c.node_id,
        *_rate_columns(metrics, v0s, v1s, span.c.t0, span.c.t1),
    ).select_from(
        span.join(v0s, and_(v0s.c.gpu_id == span.c.gpu_id, v0s.c.sampled_at == span.c.t0)).join(
            v1s, and_(v1s.c.gpu_id == span.c.gpu_id, v1s.c.sampled_at == span.c.t1)
        )
    )
    return list(ctx.session.execute(stmt).all())


def _gpu_rates_lateral(
    ctx: RuleFleet, window_s: float, metrics: list[str], first: Any, in_window: tuple[Any, ...]
) -> list[Any]:
    """:func:`gpu_rates` on Postgres: the window's oldest sample as a ``LATERAL`` subquery."""
    t = TARGETS["gpu"].table
    v0s = select(first).where(*in_window).order_by(first.c.sampled_at).limit(1).lateral("v0")
    v1s = t.alias("v1")
    stmt = _fresh_gpus(
        ctx,
        window_s,
        Gpu.id,
        Gpu.node_id,
        *_rate_columns(metrics, v0s, v1s, v0s.c.sampled_at, v1s.c.sampled_at),
    )
    if stmt is None:
        return []
    stmt = stmt.join(v1s, and_(v1s.c.gpu_id == Gpu.id, v1s.c.sampled_at == Gpu.last_sample_at))
    return list(ctx.session.execute(stmt.join(v0s, literal(True))).all())


def _rate_columns(metrics: list[str], v0s: Any, v1s: Any, t0: Any, t1: Any) -> list[Any]:
    """Per metric ``(v1 − v0) ÷ (t1 − t0)`` when ``t1 > t0`` and the value did not go down,
    else NULL."""
    seconds = epoch_s(t1) - epoch_s(t0)
    rates = []
    for metric in metrics:
        v0 = cast(TARGETS["gpu"].metrics[metric](v0s), Float)
        v1 = cast(TARGETS["gpu"].metrics[metric](v1s), Float)
        rates.append(case((and_(t1 > t0, v1 >= v0), (v1 - v0) / seconds), else_=None))
    return rates


def host_latest(ctx: RuleFleet, target_name: str, metrics: list[str]) -> list[Any]:
    """Rows ``(node_id, keys…, values…)`` of each host entity's current reading
    (:mod:`app.series.latest`: one row per entity, kept by the ingest) when it is within
    ``LATEST_WINDOW_S`` of its node's newest sample, for fresh nodes: the newest raw row of
    each entity in that window, without grouping the raw rows."""
    target = TARGETS[target_name]
    spec = latest.BY_RAW[target.table.name]
    t = spec.table
    node_ids = ctx.fresh_node_ids
    if earliest_newest(ctx, node_ids) is None:
        return []
    stmt = (
        select(
            t.c.node_id,
            *(t.c[k] for k in target.keys),
            *(target.metrics[m](t) for m in metrics),
        )
        .join(Node, Node.id == t.c.node_id)
        .where(within(ctx, t.c.sampled_at, Node.last_sample_at, LATEST_WINDOW_S))
    )
    if ctx.only_nodes is not None or len(node_ids) < len(ctx.nodes):
        stmt = stmt.where(Node.id.in_(sorted(node_ids)))
    return list(ctx.session.execute(stmt).all())


def rates(ctx: RuleFleet, target_name: str, window_s: float, metrics: list[str]) -> list[Any]:
    """Per entity and metric: (value at the newest sample − value at the oldest sample within
    the window) ÷ seconds between them; None for one sample, a missing value or a reset."""
    target = TARGETS[target_name]
    t = target.table
    keys = entity_columns(target)
    names = [c.key for c in keys]
    base = windowed(
        ctx,
        target,
        None,
        window_s,
        *keys,
        func.min(t.c.sampled_at).label("t0"),
        func.max(t.c.sampled_at).label("t1"),
    )
    if base is None:
        return []
    span = base.group_by(*keys).subquery()
    first, last = t.alias("first"), t.alias("last")

    def at(alias: Any, when: Any) -> Any:
        on = [alias.c[target.owner] == span.c[target.owner], alias.c.sampled_at == when]
        return and_(*on, *(alias.c[k] == span.c[k] for k in target.keys))

    seconds = epoch_s(span.c.t1) - epoch_s(span.c.t0)
    rates = []
    for metric in metrics:
        v0 = cast(target.metrics[metric](first), Float)
        v1 = cast(target.metrics[metric](last), Float)
        rates.append(case((and_(span.c.t1 > span.c.t0, v1 >= v0), (v1 - v0) / seconds), else_=None))
    stmt = select(*(span.c[n] for n in names), *rates).select_from(
        span.join(first, at(first, span.c.t0)).join(last, at(last, span.c.t1))
    )
    return list(ctx.session.execute(stmt).all())


def key_names(target_name: str) -> list[str]:
    """The names of the entity columns of the rows these statements return for
    ``target_name``: ``gpu_id, node_id`` for GPUs, ``node_id`` and the entity key for hosts."""
    return [c.key for c in entity_columns(TARGETS[target_name])]
