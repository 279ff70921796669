"""Threshold kind: ``aggregation(metric over window) op threshold`` per GPU, node, disk, mount,
NFS mount or NIC port. The comparison runs in SQL (``HAVING``), so only entities whose
condition holds — or that have no data, when the rule's ``no_data`` is not ``ok`` — come back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import and_, func, or_, select

from app.alerts.context import EvalContext, Observation
from app.alerts.kinds import OPERATORS, compare
from app.alerts.kinds.samples import entity_columns, windowed
from app.alerts.spec import RuleSpec, ThresholdCondition
from app.alerts.targets import GPU_STATE_METRICS, TARGETS
from app.health.rules import LOST_GPU_STATES
from app.timeseries import LATEST_WINDOW_S

AGGREGATES: dict[str, Callable[[Any], Any]] = {
    "avg": func.avg,
    "min": func.min,
    "max": func.max,
}


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of a threshold rule (see the module doc)."""
    cond = spec.condition
    assert isinstance(cond, ThresholdCondition)
    if cond.target == "node":
        return _node(ctx, spec, cond)
    if cond.metric in GPU_STATE_METRICS:
        return _gpu_state(ctx, spec, cond)
    target = TARGETS[cond.target]
    expr = target.metrics[cond.metric](target.table)
    keys = entity_columns(target)
    if cond.aggregation == "last":
        # The newest row per entity: its max(sampled_at) within the latest window.
        newest = windowed(
            ctx,
            target,
            spec.scope,
            LATEST_WINDOW_S,
            *keys,
            func.max(target.table.c.sampled_at).label("at"),
        )
        if newest is None:
            return []
        sub = newest.group_by(*keys).subquery()
        t = target.table
        join_on = [t.c[target.owner] == sub.c[target.owner], t.c.sampled_at == sub.c.at]
        join_on += [t.c[k] == sub.c[k] for k in target.keys]
        names = [c.key for c in keys]
        test = OPERATORS[cond.op](expr, cond.threshold)
        stmt: Any = (
            select(*(sub.c[n] for n in names), expr.label("value"))
            .select_from(t.join(sub, and_(*join_on)))
            .where(or_(test, expr.is_(None)) if spec.no_data != "ok" else test)
        )
    else:
        agg = AGGREGATES[cond.aggregation](expr)
        base = windowed(ctx, target, spec.scope, cond.window, *keys, agg.label("value"))
        if base is None:
            return []
        test = OPERATORS[cond.op](agg, cond.threshold)
        stmt = base.group_by(*keys).having(
            or_(test, agg.is_(None)) if spec.no_data != "ok" else test
        )
    return [
        _observation(ctx, spec, cond, row)
        for row in ctx.session.execute(stmt).mappings()
        if _in_scope(ctx, spec, cond, row)
    ]


def _in_scope(ctx: EvalContext, spec: RuleSpec, cond: ThresholdCondition, row: Any) -> bool:
    if cond.target == "gpu":
        return ctx.gpu_in(spec.scope, row["gpu_id"])
    return True


def _observation(
    ctx: EvalContext, spec: RuleSpec, cond: ThresholdCondition, row: Any
) -> Observation:
    value = None if row["value"] is None else float(row["value"])
    if cond.target == "gpu":
        gpu = ctx.gpus[row["gpu_id"]]
        return Observation(
            ctx.gpu_labels(gpu.id),
            (ctx.nodes[gpu.node_id].hostname, gpu.uuid),
            value,
            compare(value, cond.op, cond.threshold),
            ctx.gpu_entity(gpu.id),
        )
    target = TARGETS[cond.target]
    hostname = ctx.nodes[row["node_id"]].hostname
    extra = {k: str(row[k]) for k in target.keys}
    return Observation(
        {**ctx.node_labels(row["node_id"]), **extra},
        (hostname, *extra.values()),
        value,
        compare(value, cond.op, cond.threshold),
        " ".join([hostname, "/".join(extra.values())]),
    )


def _gpu_state(ctx: EvalContext, spec: RuleSpec, cond: ThresholdCondition) -> list[Observation]:
    out = []
    for gpu in ctx.gpus.values():
        if gpu.node_id not in ctx.fresh_node_ids or not ctx.gpu_in(spec.scope, gpu.id):
            continue
        value = 1.0 if gpu.state in LOST_GPU_STATES else 0.0
        if compare(value, cond.op, cond.threshold):
            out.append(
                Observation(
                    ctx.gpu_labels(gpu.id),
                    (ctx.nodes[gpu.node_id].hostname, gpu.uuid),
                    value,
                    True,
                    ctx.gpu_entity(gpu.id),
                )
            )
    return out


def _node(ctx: EvalContext, spec: RuleSpec, cond: ThresholdCondition) -> list[Observation]:
    missing = Counter(g.node_id for g in ctx.gpus.values() if g.state == "missing")
    lost = Counter(g.node_id for g in ctx.gpus.values() if g.state in LOST_GPU_STATES)
    out = []
    for node_id in sorted(ctx.fresh_node_ids):
        if not ctx.node_in(spec.scope, node_id):
            continue
        node = ctx.nodes[node_id]
        value: float | None = {
            "gpu_missing_count": float(missing[node_id]),
            "gpu_lost_count": float(lost[node_id]),
            "clock_skew_s": node.clock_skew_s,
        }[cond.metric]
        met = compare(value, cond.op, cond.threshold)
        if met or (met is None and spec.no_data != "ok"):
            out.append(
                Observation(ctx.node_labels(node_id), (node.hostname,), value, met, node.hostname)
            )
    return out
