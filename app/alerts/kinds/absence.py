"""Absence kind: a node with no batch received for ``after`` (``node.last_seen_at``, never-seen
nodes counted from ``created_at``), a GPU of a fresh node missing from the batches received for
``after`` (``gpu.last_seen_at``), or a GPU metric with no non-null value received for ``after``
(``gpu_sample.received_at``). All server receive times: agent clock skew cannot fake death."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import AbsenceCondition, RuleSpec
from app.metrics.models import gpu_sample


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of an absence rule; ``value`` is the seconds since last received (None for a
    metric never received within the bound scanned)."""
    cond = spec.condition
    assert isinstance(cond, AbsenceCondition)
    now, out = ctx.now, []
    after = cond.after if cond.after is not None else ctx.stale_after_s
    if cond.target == "node":
        for node in ctx.nodes.values():
            if not ctx.node_in(spec.scope, node.id):
                continue
            age = (now - (node.last_seen_at or node.created_at)).total_seconds()
            if age > after:
                out.append(
                    Observation(
                        ctx.node_labels(node.id), (node.hostname,), age, True, node.hostname
                    )
                )
        return out
    in_scope = ctx.scoped_gpus(spec.scope)
    fresh = ctx.fresh_node_ids
    gpus = [
        g
        for g in ctx.gpus.values()
        if g.node_id in fresh and (in_scope is None or g.id in in_scope)
    ]
    if cond.target == "gpu":
        ages = {g.id: (now - g.last_seen_at).total_seconds() for g in gpus}
        absent: dict[int, float | None] = {gid: age for gid, age in ages.items() if age > after}
    else:
        assert cond.metric is not None
        since = now - timedelta(seconds=after)
        skews = [abs(ctx.nodes[g.node_id].clock_skew_s or 0.0) for g in gpus]
        # sampled_at bounds the index scan; received_at (server time) decides. Rules asking
        # the same (metric, bounds) share one statement: it does not depend on the scope.
        lower = since - timedelta(seconds=max(skews, default=0.0) + 60.0)
        key = (cond.metric, since, lower)
        cache: dict[tuple[str, datetime, datetime], set[int]]
        cache = ctx.cache.setdefault("absence_present", {})
        if key not in cache:
            cache[key] = set(
                ctx.session.scalars(
                    select(gpu_sample.c.gpu_id)
                    .where(
                        gpu_sample.c.sampled_at >= lower,
                        gpu_sample.c.received_at >= since,
                        gpu_sample.c[cond.metric].isnot(None),
                    )
                    .distinct()
                )
            )
        present = cache[key]
        absent = {g.id: None for g in gpus if g.id not in present}
    for gpu_id, seconds in sorted(absent.items()):
        gpu = ctx.gpus[gpu_id]
        out.append(
            Observation(
                ctx.gpu_labels(gpu_id),
                (ctx.nodes[gpu.node_id].hostname, gpu.uuid),
                seconds,
                True,
                ctx.gpu_entity(gpu_id),
            )
        )
    return out
