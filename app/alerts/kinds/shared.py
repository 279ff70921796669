"""Aggregates shared by every rule of one evaluation: one scan per (target, window) computes
every metric and aggregation the rules ask for over that window, for every entity of every
fresh node, and each rule then picks its column, its scope and its comparison in Python.

500 rules over 8,000 GPUs are then a handful of statements (per target one scan of its widest
window for every window at once, one primary-key lookup per GPU for the newest rows, one per
rate window; see :mod:`app.series.rule_scans`) instead of 500, each returning one row per
entity, never histories.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import numpy as np

from app.alerts.context import EvalContext
from app.alerts.kinds import prefetch
from app.alerts.kinds.entity_values import EntityValues
from app.alerts.spec import RateCondition, RuleSpec, ThresholdCondition
from app.series import recent_gpu
from app.series import rule_scans as scans
from app.series.rule_targets import GPU_STATE_METRICS, TARGETS
from app.series.writes import LATEST_WINDOW_S

#: (owner id, node id, *keys): a GPU is (gpu_id, node_id); a disk (node_id, node_id, device).
EntityKey = tuple[Any, ...]
Need = tuple[str, str]  # (metric, aggregation: last | avg | min | max | rate)
_CACHE = "shared_aggregates"
_PLAN = "shared_plan"
_AHEAD = "shared_read_ahead"


def _slot(cond: ThresholdCondition | RateCondition) -> tuple[tuple[str, str, float], Need]:
    if isinstance(cond, RateCondition):
        return (cond.target, "rate", cond.window), (cond.metric, "rate")
    if cond.aggregation == "last":
        return (cond.target, "last", 0.0), (cond.metric, "last")
    return (cond.target, "window", cond.window), (cond.metric, cond.aggregation)


def plan(ctx: EvalContext, specs: Iterable[RuleSpec]) -> None:
    """Register what every rule of this evaluation will ask for, so each scan computes all
    of it at once."""
    wanted: dict[tuple[str, str, float], set[Need]] = ctx.cache.setdefault(_PLAN, {})
    for spec in specs:
        cond = spec.condition
        if isinstance(cond, RateCondition) or (
            isinstance(cond, ThresholdCondition)
            and cond.target != "node"
            and cond.metric not in GPU_STATE_METRICS
        ):
            slot, need = _slot(cond)
            wanted.setdefault(slot, set()).add(need)


def values(ctx: EvalContext, cond: ThresholdCondition | RateCondition) -> EntityValues:
    """The condition's aggregate for every entity of every fresh node (None: no data); rate
    conditions get the rise per second. GPU windows up to :data:`recent_gpu.MAX_SPAN_S` come
    from the GPUs' recent samples in memory (:func:`_recent_gpu_windows`); other window slots
    of one target are computed together (:func:`app.series.rule_scans.windows`)."""
    slot, need = _slot(cond)
    cache: dict[tuple[str, str, float], dict[Need, EntityValues]]
    cache = ctx.cache.setdefault(_CACHE, {})
    ahead: prefetch.ReadAhead | None = ctx.cache.get(_AHEAD)
    if ahead is not None and need not in cache.get(slot, {}):
        got = ahead.take(slot)
        if got is not None:
            prefetch.merged(got, cache)
    if need not in cache.get(slot, {}):
        planned: dict[tuple[str, str, float], set[Need]] = ctx.cache.setdefault(_PLAN, {})
        planned.setdefault(slot, set()).add(need)
        if slot[1] == "window":
            recent = _is_recent_gpu(slot)
            group = _window_group(planned, slot)
            if recent:
                cache.update(_recent_gpu_windows(ctx, group))
            else:
                cache.update(_windows_of(slot[0], group, ctx))
        elif slot == ("gpu", "last", 0.0) and _memory_for_last(ctx):
            cache[slot] = _recent_gpu_last(ctx, sorted(planned[slot]))
        else:
            cache[slot] = _compute(ctx, slot, sorted(planned[slot]))
    return cache[slot][need]


def read_ahead(ctx: EvalContext, work_mem: str) -> None:
    """Start reading the planned slots that only SQL serves (rates, host windows and host
    ``last``) on a second connection (:mod:`app.alerts.kinds.prefetch`), in the order the
    rules first ask for them, when ``ctx`` is the scheduler's whole-fleet evaluation on
    Postgres; :func:`values` then takes them. Call :func:`finish` when the rules are
    observed."""
    recent = ctx.recent_gpu
    if (
        recent is None
        or not recent.consume_feed
        or ctx.only_nodes is not None
        or ctx.session.get_bind().dialect.name != "postgresql"
    ):
        return
    planned: dict[tuple[str, str, float], set[Need]] = ctx.cache.get(_PLAN, {})
    reads: list[tuple[frozenset[tuple[str, str, float]], prefetch.Read]] = []
    grouped: set[tuple[str, str]] = set()
    for slot, needs in planned.items():
        target_name, mode, _ = slot
        if mode == "window" and not _is_recent_gpu(slot) and slot[:2] not in grouped:
            grouped.add(slot[:2])
            group = _window_group(planned, slot)
            reads.append((frozenset(group), functools.partial(_windows_of, slot[0], group)))
        elif mode == "rate" or (mode == "last" and target_name != "gpu"):
            reads.append((frozenset([slot]), functools.partial(_computed_of, slot, sorted(needs))))
    if reads:
        ctx.cache[_AHEAD] = prefetch.ReadAhead(ctx, reads, work_mem)


def waits_for_read_ahead(ctx: EvalContext, spec: RuleSpec) -> bool:
    """Whether ``spec``'s aggregate is among those :func:`read_ahead` reads (observing such
    rules last gives the reads time to finish)."""
    ahead: prefetch.ReadAhead | None = ctx.cache.get(_AHEAD)
    cond = spec.condition
    if ahead is None or not isinstance(cond, ThresholdCondition | RateCondition):
        return False
    return _slot(cond)[0] in ahead.slots


def finish(ctx: EvalContext) -> None:
    """End :func:`read_ahead`'s reads (waiting for any still running)."""
    ahead: prefetch.ReadAhead | None = ctx.cache.pop(_AHEAD, None)
    if ahead is not None:
        ahead.close()


def _window_group(
    planned: dict[tuple[str, str, float], set[Need]], slot: tuple[str, str, float]
) -> dict[tuple[str, str, float], list[Need]]:
    """The planned window slots computed together with ``slot``: its target's, all from memory
    or all in SQL as ``slot`` is."""
    recent = _is_recent_gpu(slot)
    return {
        s: sorted(n)
        for s, n in planned.items()
        if s[:2] == slot[:2] and _is_recent_gpu(s) == recent
    }


def _windows_of(
    target_name: str, group: dict[tuple[str, str, float], list[Need]], ctx: Any
) -> dict[tuple[str, str, float], dict[Need, EntityValues]]:
    return {
        s: {n: EntityValues.of(v) for n, v in columns.items()}
        for s, columns in scans.windows(ctx, target_name, group).items()
    }


def _computed_of(
    slot: tuple[str, str, float], needs: list[Need], ctx: Any
) -> dict[tuple[str, str, float], dict[Need, EntityValues]]:
    return {slot: _compute(ctx, slot, needs)}


def _is_recent_gpu(slot: tuple[str, str, float]) -> bool:
    return slot[0] == "gpu" and slot[1] == "window" and slot[2] <= recent_gpu.MAX_SPAN_S


def _memory_for_last(ctx: EvalContext) -> bool:
    """Whether GPU ``last`` values come from the recent samples: only for the scheduler's
    feed reader over the whole fleet (elsewhere a load of every window per evaluation costs
    more than the primary-key lookups), and only when the windows planned from memory keep
    ``LATEST_WINDOW_S`` of samples (a whole load reads a node's GPUs within the span of its
    newest sample: with a shorter span a GPU lagging its node would be missing)."""
    recent = ctx.recent_gpu
    if recent is None or not recent.consume_feed or ctx.only_nodes is not None:
        return False
    planned: dict[tuple[str, str, float], set[Need]] = ctx.cache.get(_PLAN, {})
    span_s = max((s[2] for s in planned if _is_recent_gpu(s)), default=0.0)
    return span_s >= LATEST_WINDOW_S


def _recent(
    ctx: EvalContext, group: dict[tuple[str, str, float], list[Need]]
) -> recent_gpu.RecentGpuSamples:
    """The recent samples (``ctx.recent_gpu``, or a fresh one when the context has none),
    refreshed once per evaluation for every metric and window planned from memory (GPU
    windows up to :data:`recent_gpu.MAX_SPAN_S`, GPU ``last`` when :func:`_memory_for_last`)
    and ``group``'s."""
    recent = ctx.recent_gpu
    if recent is None:
        recent = ctx.cache.setdefault("recent_gpu", recent_gpu.RecentGpuSamples())
    planned: dict[tuple[str, str, float], set[Need]] = ctx.cache.get(_PLAN, {})
    slots = {s: set(n) for s, n in planned.items() if _is_recent_gpu(s)}
    if _memory_for_last(ctx) and ("gpu", "last", 0.0) in planned:
        slots[("gpu", "last", 0.0)] = planned[("gpu", "last", 0.0)]
    for slot, needs in group.items():
        slots.setdefault(slot, set()).update(needs)
    target = TARGETS["gpu"]
    metrics = {m: target.metrics[m] for needs in slots.values() for m, _ in needs}
    span_s = max((s[2] for s in slots), default=0.0)
    wanted = (frozenset(metrics), span_s)
    done: set[tuple[frozenset[str], float]] = ctx.cache.setdefault("recent_gpu_refreshed", set())
    if not any(wanted[0] <= names and wanted[1] <= span for names, span in done):
        node_ids = None if ctx.only_nodes is None else sorted(ctx.only_nodes)
        recent.refresh(ctx.session, metrics=metrics, span_s=span_s, node_ids=node_ids)
        done.add(wanted)
    ctx.cache["recent_gpu_used"] = True
    return recent


def _fresh_gpu_ends(ctx: EvalContext) -> tuple[list[EntityKey], list[int], list[int], list[Any]]:
    """Every GPU of every fresh node whose node has a sample: its key ``(gpu_id, node_id)``,
    id, node id and the node's newest sample time (where its windows end)."""
    ended = [
        (g, end)
        for g in ctx.gpus.values()
        if g.node_id in ctx.fresh_node_ids
        and (end := ctx.nodes[g.node_id].last_sample_at) is not None
    ]
    keys = [(g.id, g.node_id) for g, _ in ended]
    return keys, [g.id for g, _ in ended], [g.node_id for g, _ in ended], [e for _, e in ended]


def _recent_gpu_windows(
    ctx: EvalContext, group: dict[tuple[str, str, float], list[Need]]
) -> dict[tuple[str, str, float], dict[Need, EntityValues]]:
    """Every slot of ``group`` (GPU windows up to :data:`recent_gpu.MAX_SPAN_S`) for every GPU
    of every fresh node, from the recent samples (:func:`_recent`), each window ending at the
    GPU's node's newest sample. A GPU with no sample in a window is left out of it."""
    recent = _recent(ctx, group)
    keys, gpu_ids, owners, ends = _fresh_gpu_ends(ctx)
    slots = sorted(group.items())
    computed = recent.windows(gpu_ids, owners, ends, [(slot[2], needs) for slot, needs in slots])
    out: dict[tuple[str, str, float], dict[Need, EntityValues]] = {}
    for (slot, needs), windows in zip(slots, computed, strict=True):
        kept = np.flatnonzero(windows.present)
        in_window = [keys[i] for i in kept.tolist()]
        out[slot] = {n: EntityValues(in_window, windows.values[n][kept]) for n in needs}
    return out


def _recent_gpu_last(ctx: EvalContext, needs: list[Need]) -> dict[Need, EntityValues]:
    """GPU ``last`` of ``needs`` from the recent samples: each GPU's newest sample when it is
    within ``LATEST_WINDOW_S`` of its node's newest, as :func:`scans.gpu_latest` reads it
    from the table (~0.06 s a tick at 8,000 GPUs, and the rows turned into arrays)."""
    recent = _recent(ctx, {("gpu", "last", 0.0): needs})
    keys, gpu_ids, owners, ends = _fresh_gpu_ends(ctx)
    got = recent.latest(gpu_ids, owners, ends, LATEST_WINDOW_S, [m for m, _ in needs])
    kept = np.flatnonzero(got.present)
    present = [keys[i] for i in kept.tolist()]
    return {n: EntityValues(present, got.values[(n[0], "last")][kept]) for n in needs}


def _compute(
    ctx: EvalContext, slot: tuple[str, str, float], needs: list[Need]
) -> dict[Need, EntityValues]:
    target_name, mode, window_s = slot
    names = scans.key_names(target_name)
    metrics = [m for m, _ in needs]
    if target_name == "gpu" and mode == "last":
        rows = scans.gpu_latest(ctx, LATEST_WINDOW_S, metrics)
    elif target_name == "gpu" and mode == "rate":
        rows = scans.gpu_rates(ctx, window_s, metrics)
    elif mode == "last":
        rows = scans.host_latest(ctx, target_name, metrics)
    else:
        rows = scans.rates(ctx, target_name, window_s, metrics)
    if not rows:
        return {n: EntityValues([], np.zeros(0)) for n in needs}
    # Column by column (8,000 GPUs × each need as Python floats took ~0.2 s a tick).
    width = len(names)
    columns = list(zip(*rows, strict=True))
    keys = list(zip(*columns[:width], strict=True))
    return {
        need: EntityValues(keys, np.array(column, dtype=np.float64))
        for need, column in zip(needs, columns[width:], strict=True)
    }
