"""Absence kind: a node with no batch received for ``after`` (``node.last_seen_at``; a node that
never reported is not absent but not yet there: creating its token pages nobody), a GPU of a
fresh node missing from the batches received for ``after`` (``gpu.last_seen_at``), or a GPU
metric with no non-null value received for ``after`` (the samples' ``received_at``,
:func:`app.series.gpu_now.reported_since`). All server receive times: agent clock skew cannot
fake death."""

from __future__ import annotations

import bisect
from datetime import datetime, timedelta

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import AbsenceCondition, RuleSpec
from app.series import gpu_now


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of an absence rule; ``value`` is the seconds since last received (None for a
    metric never received within the bound scanned). Ages are computed once per evaluation and
    kept sorted, so a rule looks only at the entities older than its ``after``."""
    cond = spec.condition
    assert isinstance(cond, AbsenceCondition)
    now, out = ctx.now, []
    after = cond.after if cond.after is not None else ctx.stale_after_s
    if cond.target == "node":
        ages, ids = _sorted_ages(ctx, "node")
        for i in range(bisect.bisect_right(ages, after), len(ages)):
            node = ctx.nodes[ids[i]]
            if ctx.node_in(spec.scope, node.id):
                out.append(
                    Observation(
                        ctx.node_labels(node.id), (node.hostname,), ages[i], True, node.hostname
                    )
                )
        return out
    absent: dict[int, float | None]
    if cond.target == "gpu":
        ages, ids = _sorted_ages(ctx, "gpu")
        start = bisect.bisect_right(ages, after)
        absent = {ids[i]: ages[i] for i in range(start, len(ages))}
    else:
        assert cond.metric is not None
        since = now - timedelta(seconds=after)
        fresh = _fresh_gpu_ids(ctx)
        skews = [abs(ctx.nodes[n].clock_skew_s or 0.0) for n in ctx.fresh_node_ids]
        # sampled_at bounds the index scan; received_at (server time) decides. Rules asking
        # the same (metric, bounds) share one statement: it does not depend on the scope.
        lower = since - timedelta(seconds=max(skews, default=0.0) + 60.0)
        key = (cond.metric, since, lower)
        cache: dict[tuple[str, datetime, datetime], set[int]]
        cache = ctx.cache.setdefault("absence_present", {})
        if key not in cache:
            cache[key] = gpu_now.reported_since(
                ctx.session, cond.metric, received_since=since, sampled_since=lower
            )
        absent = dict.fromkeys(fresh - cache[key])
    in_scope = ctx.scoped_gpus(spec.scope)
    for gpu_id, seconds in sorted(absent.items()):
        if in_scope is not None and gpu_id not in in_scope:
            continue
        if cond.metric is not None and ctx.unsupported(gpu_id, cond.metric):
            continue  # a metric the card does not support is never received: not absent
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


def _fresh_gpu_ids(ctx: EvalContext) -> set[int]:
    """Ids of the GPUs of fresh nodes (once per evaluation)."""
    if "absence_fresh_gpus" not in ctx.cache:
        fresh = ctx.fresh_node_ids
        ctx.cache["absence_fresh_gpus"] = {g.id for g in ctx.gpus.values() if g.node_id in fresh}
    ids: set[int] = ctx.cache["absence_fresh_gpus"]
    return ids


def _sorted_ages(ctx: EvalContext, target: str) -> tuple[list[float], list[int]]:
    """Seconds since each node that ever reported was last seen, or each GPU of a fresh node,
    ascending, with the ids in the same order (once per evaluation)."""
    key = f"absence_ages_{target}"
    if key not in ctx.cache:
        now = ctx.now
        if target == "node":
            pairs = [
                ((now - n.last_seen_at).total_seconds(), n.id)
                for n in ctx.nodes.values()
                if n.last_seen_at is not None
            ]
        else:
            fresh = _fresh_gpu_ids(ctx)
            pairs = [
                ((now - g.last_seen_at).total_seconds(), g.id)
                for g in ctx.gpus.values()
                if g.id in fresh
            ]
        pairs.sort()
        ctx.cache[key] = ([age for age, _ in pairs], [i for _, i in pairs])
    ages: tuple[list[float], list[int]] = ctx.cache[key]
    return ages
