"""Threshold kind: ``aggregation(metric over window) op threshold`` per GPU, node, disk, mount,
NFS mount or NIC port. Sample aggregates come from :mod:`app.alerts.kinds.shared` (one scan per
window for all rules); node metrics and ``gpu_lost`` from the inventory read once per
evaluation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.alerts.context import EvalContext, Observation
from app.alerts.kinds import compare, shared
from app.alerts.kinds.entity_values import EntityValues
from app.alerts.spec import RuleSpec, ThresholdCondition
from app.fleet.service import never_listed
from app.health.rules import LOST_GPU_STATES
from app.series.rule_targets import GPU_STATE_METRICS, TARGETS


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
    values: Mapping[Any, float | None],
    op: str,
    threshold: float,
    *,
    scale: float = 1.0,
) -> list[Observation]:
    """Compare each entity's value (times ``scale``) within the rule's scope. Only the
    breaching entities (one vectorised comparison, :meth:`EntityValues.breaching`, the test of
    :func:`app.alerts.kinds.compare`: so each chosen value is met, or no data when missing)
    and, unless ``no_data`` is ok, those with no value are looked at — but not a GPU whose
    driver says it does not support the metric (:mod:`app.fleet.value_quality`)."""
    keep_no_data = spec.no_data != "ok"
    keys = TARGETS[target].keys
    table = _as_arrays(ctx, values)
    chosen = table.breaching(op, threshold, scale=scale, with_no_data=keep_no_data)
    if not chosen:
        return []
    picked = table.array[chosen]
    if scale != 1.0:
        with np.errstate(invalid="ignore", over="ignore"):
            picked = picked * scale
    found = zip([table.keys_in_order[p] for p in chosen], picked.tolist(), strict=True)
    out = []
    if target == "gpu":
        in_scope = scoped_gpus(ctx, spec)
        idents = _gpu_identities(ctx)
        metric = getattr(spec.condition, "metric", None)
        for key, value in found:
            gpu_id = key[0]
            if in_scope is not None and gpu_id not in in_scope:
                continue
            ident = idents.get(gpu_id) or _gpu_identity(ctx, gpu_id)
            if ident is None:  # gone from the fleet since its samples were read
                continue
            missing = value != value
            if missing and metric is not None and ctx.unsupported(gpu_id, metric):
                continue  # the card cannot report it: not "no data"
            out.append(
                Observation(
                    ident[0],
                    ident[1],
                    None if missing else value,
                    None if missing else True,
                    ident[2],
                )
            )
        return out
    for key, value in found:
        node_id = key[0]
        if not ctx.node_in(spec.scope, node_id):
            continue
        missing = value != value
        hostname = ctx.nodes[node_id].hostname
        extra = {k: str(v) for k, v in zip(keys, key[1:], strict=True)}
        out.append(
            Observation(
                {**ctx.node_labels(node_id), **extra},
                (hostname, *extra.values()),
                None if missing else value,
                None if missing else True,
                f"{hostname} {'/'.join(extra.values())}",
            )
        )
    return out


def _gpu_identities(ctx: EvalContext) -> dict[int, tuple[dict[str, str], tuple[str, str], str]]:
    """Per GPU id, its (labels, identity, entity) as observations carry them, built once per
    GPU and evaluation (:func:`_gpu_identity`) and shared by every rule (never mutated)."""
    cache: dict[int, tuple[dict[str, str], tuple[str, str], str]]
    cache = ctx.cache.setdefault("gpu_identities", {})
    return cache


def _gpu_identity(
    ctx: EvalContext, gpu_id: int
) -> tuple[dict[str, str], tuple[str, str], str] | None:
    """:func:`_gpu_identities`' entry of ``gpu_id``, made now; None when the GPU is not in
    ``ctx.gpus``."""
    gpu = ctx.gpus.get(gpu_id)
    if gpu is None:
        return None
    ident = (
        _gpu_labels(ctx, gpu_id),
        (ctx.nodes[gpu.node_id].hostname, gpu.uuid),
        ctx.gpu_entity(gpu_id),
    )
    _gpu_identities(ctx)[gpu_id] = ident
    return ident


def breaching(
    ctx: EvalContext,
    values: Mapping[Any, float | None],
    op: str,
    threshold: float,
    *,
    scale: float = 1.0,
    with_no_data: bool = False,
) -> list[Any]:
    """The keys of ``values`` whose ``value × scale op threshold`` holds (plus, with
    ``with_no_data``, those whose value is None or NaN), in ``values``' order."""
    table = _as_arrays(ctx, values)
    chosen = table.breaching(op, threshold, scale=scale, with_no_data=with_no_data)
    return [table.keys_in_order[p] for p in chosen]


def _as_arrays(ctx: EvalContext, values: Mapping[Any, float | None]) -> EntityValues:
    """``values`` as :class:`EntityValues`, converted once per evaluation when given as a
    plain mapping (the rules sharing an aggregate share the conversion)."""
    if isinstance(values, EntityValues):
        return values
    cache: dict[int, tuple[Any, EntityValues]] = ctx.cache.setdefault("threshold_arrays", {})
    entry = cache.get(id(values))
    if entry is None or entry[0] is not values:
        entry = (values, EntityValues.of(values))
        cache[id(values)] = entry
    return entry[1]


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
            Counter(g.node_id for g in ctx.gpus.values()),
        )
    missing, lost, rows = ctx.cache["node_counts"]
    out = []
    for node_id in sorted(ctx.fresh_node_ids):
        if not ctx.node_in(spec.scope, node_id):
            continue
        node = ctx.nodes[node_id]
        # Missing: GPUs of the inventory absent from the latest batch, and those of the count
        # the node's agent says it has that never entered the inventory (app.health.checks).
        absent = never_listed(node.expected_gpu_count, rows[node_id])
        value: float | None = {
            "gpu_missing_count": float(missing[node_id] + absent),
            "gpu_lost_count": float(lost[node_id]),
            "clock_skew_s": node.clock_skew_s,
        }[cond.metric]
        met = compare(value, cond.op, cond.threshold)
        if met or (met is None and spec.no_data != "ok"):
            out.append(
                Observation(ctx.node_labels(node_id), (node.hostname,), value, met, node.hostname)
            )
    return out
