"""Rate-of-change kind: how fast a cumulative counter rises, (newest − oldest value within the
window) ÷ their time apart, scaled to ``per`` (e.g. corrected ECC errors per hour). Fewer than
two samples with a value, or a counter that went down (a reset), is no data."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, and_, case, cast, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from app.alerts.context import EvalContext, Observation
from app.alerts.kinds import OPERATORS, compare
from app.alerts.kinds.samples import entity_columns, windowed
from app.alerts.spec import RateCondition, RuleSpec
from app.alerts.targets import TARGETS
from app.db import epoch_s

PER_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of a rate rule (see the module doc)."""
    cond = spec.condition
    assert isinstance(cond, RateCondition)
    target = TARGETS[cond.target]
    t = target.table
    expr = target.metrics[cond.metric](t)
    keys = entity_columns(target)
    base = windowed(
        ctx,
        target,
        spec.scope,
        cond.window,
        *keys,
        func.min(t.c.sampled_at).label("t0"),
        func.max(t.c.sampled_at).label("t1"),
    )
    if base is None:
        return []
    span = base.where(expr.isnot(None)).group_by(*keys).subquery()
    first, last = t.alias("first"), t.alias("last")

    def at(alias: Any, when: Any) -> ColumnElement[bool]:
        on = [alias.c[target.owner] == span.c[target.owner], alias.c.sampled_at == when]
        return and_(*on, *(alias.c[k] == span.c[k] for k in target.keys))

    v0 = cast(target.metrics[cond.metric](first), Float)
    v1 = cast(target.metrics[cond.metric](last), Float)
    seconds = epoch_s(span.c.t1) - epoch_s(span.c.t0)
    rate = case(
        (and_(span.c.t1 > span.c.t0, v1 >= v0), (v1 - v0) / seconds * PER_S[cond.per]),
        else_=None,
    )
    test = OPERATORS[cond.op](rate, cond.threshold)
    names = [c.key for c in keys]
    stmt = (
        select(*(span.c[n] for n in names), rate.label("value"))
        .select_from(span.join(first, at(first, span.c.t0)).join(last, at(last, span.c.t1)))
        .where(or_(test, rate.is_(None)) if spec.no_data != "ok" else test)
    )
    out = []
    for row in ctx.session.execute(stmt).mappings():
        value = None if row["value"] is None else float(row["value"])
        if cond.target == "gpu":
            if not ctx.gpu_in(spec.scope, row["gpu_id"]):
                continue
            gpu = ctx.gpus[row["gpu_id"]]
            out.append(
                Observation(
                    ctx.gpu_labels(gpu.id),
                    (ctx.nodes[gpu.node_id].hostname, gpu.uuid),
                    value,
                    compare(value, cond.op, cond.threshold),
                    ctx.gpu_entity(gpu.id),
                )
            )
            continue
        hostname = ctx.nodes[row["node_id"]].hostname
        extra = {k: str(row[k]) for k in target.keys}
        out.append(
            Observation(
                {**ctx.node_labels(row["node_id"]), **extra},
                (hostname, *extra.values()),
                value,
                compare(value, cond.op, cond.threshold),
                f"{hostname} {'/'.join(extra.values())}",
            )
        )
    return out
