"""Threshold kind: ``aggregation(metric over window) op threshold`` per GPU, node, disk, mount,
NFS mount or NIC port. Sample aggregates come from :mod:`app.alerts.kinds.shared` (one scan per
window for all rules); node metrics and ``gpu_lost`` from the inventory read once per
evaluation."""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.alerts.context import EvalContext, Observation
from app.alerts.kinds import compare, shared
from app.alerts.spec import RuleSpec, ThresholdCondition
from app.alerts.targets import GPU_STATE_METRICS, TARGETS
from app.health.rules import LOST_GPU_STATES


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Entities whose condition holds, plus those with no data unless ``no_data`` is ok."""
    cond = spec.condition
    assert isinstance(cond, ThresholdCondition)
    if cond.target == "node":
        return _node(ctx, spec, cond)
    if cond.metric in GPU_STATE_METRICS:
        return _gpu_state(ctx, spec, cond)
    return observations(ctx, spec, cond.target, shared.values(ctx, cond), cond.op, cond.threshold)


def observations(
    ctx: EvalContext,
    spec: RuleSpec,
    target: str,
    values: dict[Any, float | None],
    op: str,
    threshold: float,
    *,
    scale: float = 1.0,
) -> list[Observation]:
    """Compare each entity's value (times ``scale``) within the rule's scope. Only the
    breaching entities (found by binary search in the values sorted once per evaluation,
    :func:`breaching`) and, unless ``no_data`` is ok, those with no value are looked at."""
    keep_no_data = spec.no_data != "ok"
    keys = TARGETS[target].keys
    in_scope = scoped_gpus(ctx, spec) if target == "gpu" else None
    out = []
    for key in breaching(ctx, values, op, threshold, scale=scale, with_no_data=keep_no_data):
        raw = values[key]
        value = None if raw is None else raw * scale
        met = compare(value, op, threshold)
        if not (met or (met is None and keep_no_data)):
            continue
        if target == "gpu":
            gpu_id = key[0]
            if gpu_id not in ctx.gpus or (in_scope is not None and gpu_id not in in_scope):
                continue
            gpu = ctx.gpus[gpu_id]
            out.append(
                Observation(
                    _gpu_labels(ctx, gpu_id),
                    (ctx.nodes[gpu.node_id].hostname, gpu.uuid),
                    value,
                    met,
                    ctx.gpu_entity(gpu_id),
                )
            )
            continue
        node_id = key[0]
        if not ctx.node_in(spec.scope, node_id):
            continue
        hostname = ctx.nodes[node_id].hostname
        extra = {k: str(v) for k, v in zip(keys, key[1:], strict=True)}
        out.append(
            Observation(
                {**ctx.node_labels(node_id), **extra},
                (hostname, *extra.values()),
                value,
                met,
                f"{hostname} {'/'.join(extra.values())}",
            )
        )
    return out


def breaching(
    ctx: EvalContext,
    values: dict[Any, float | None],
    op: str,
    threshold: float,
    *,
    scale: float = 1.0,
    with_no_data: bool = False,
) -> list[Any]:
    """The keys of ``values`` whose ``value × scale op threshold`` holds (plus, with
    ``with_no_data``, those whose value is None or NaN), in ``values``' order. ``scale`` must
    be positive. The values are sorted once per evaluation (cached in ``ctx``); each
    comparison is then a binary search of the exact predicate, which is monotone in the value,
    so 300 rules over 8,000 GPUs do not make 2.4 million comparisons."""
    order, sorted_values, positions, missing = _index(ctx, values)

    def first(pred: Any) -> int:
        lo, hi = 0, len(sorted_values)
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(sorted_values[mid] * scale):
                hi = mid
            else:
                lo = mid + 1
        return lo

    n = len(sorted_values)
    if op in (">", ">="):
        ranges = [(first(lambda v: compare(v, op, threshold)), n)]
    elif op in ("<", "<="):
        ranges = [(0, first(lambda v: not compare(v, op, threshold)))]
    else:
        lo = first(lambda v: v >= threshold)
        hi = first(lambda v: v > threshold)
        ranges = [(lo, hi)] if op == "==" else [(0, lo), (hi, n)]
    chosen = [p for a, b in ranges for p in positions[a:b]]
    if with_no_data:
        chosen += missing
    return [order[p] for p in sorted(chosen)]


def _index(
    ctx: EvalContext, values: dict[Any, float | None]
) -> tuple[list[Any], list[float], list[int], list[int]]:
    """``values`` as (keys in order, present values sorted, their key positions, positions of
    keys with no value), cached per values dict for the evaluation."""
    cache: dict[int, tuple[Any, ...]] = ctx.cache.setdefault("threshold_index", {})
    entry = cache.get(id(values))
    if entry is None or entry[0] is not values:
        # Comprehensions and a key sort, not a loop of tuples: ~100 values dicts of 8,000
        # entries per evaluation took ~1 s the plain way.
        order = list(values)
        vals: list[Any] = list(values.values())
        missing = [i for i, v in enumerate(vals) if v is None or v != v]
        present = [i for i, v in enumerate(vals) if v is not None and v == v] if missing else None
        positions = sorted(range(len(vals)) if present is None else present, key=vals.__getitem__)
        entry = (values, order, [vals[i] for i in positions], positions, missing)
        cache[id(values)] = entry
    return entry[1], entry[2], entry[3], entry[4]


def scoped_gpus(ctx: EvalContext, spec: RuleSpec) -> set[int] | None:
    """Ids of the GPUs within the rule's scope, None for every GPU (``ctx.scoped_gpus``)."""
    return ctx.scoped_gpus(spec.scope)


def _gpu_labels(ctx: EvalContext, gpu_id: int) -> dict[str, str]:
    """``ctx.gpu_labels`` built once per GPU and evaluation (shared, never mutated)."""
    labels: dict[int, dict[str, str]] = ctx.cache.setdefault("gpu_labels", {})
    if gpu_id not in labels:
        labels[gpu_id] = ctx.gpu_labels(gpu_id)
    return labels[gpu_id]


def _gpu_state(ctx: EvalContext, spec: RuleSpec, cond: ThresholdCondition) -> list[Observation]:
    out = []
    in_scope = ctx.scoped_gpus(spec.scope)
    for gpu in ctx.gpus.values():
        if gpu.node_id not in ctx.fresh_node_ids or (
            in_scope is not None and gpu.id not in in_scope
        ):
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
    if "node_counts" not in ctx.cache:
        ctx.cache["node_counts"] = (
            Counter(g.node_id for g in ctx.gpus.values() if g.state == "missing"),
            Counter(g.node_id for g in ctx.gpus.values() if g.state in LOST_GPU_STATES),
        )
    missing, lost = ctx.cache["node_counts"]
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
