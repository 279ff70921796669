"""Event kind: at least ``min_count`` stored events of the rule's kinds (and Xids) whose
``occurred_at`` is within ``window`` of now, per GPU (per node for events naming no GPU). Each
stored occurrence is a row of ``node_event``, so a repeated Xid counts every time.

Every event rule of one evaluation with the same window shares one statement: the counts per
(node, GPU, kind, Xid) within that window, which each rule then sums over its kinds, Xids and
scope in Python (88 rules were 88 scans of ``node_event``, ~0.7 s of each wake-up at 1,000
nodes)."""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import EventCondition, RuleSpec
from app.events.models import NodeEvent
from app.incidents import service as incidents_service

_CACHE = "event_counts"
_INCIDENTS = "event_incidents"
#: (node id, GPU id or None, kind, Xid or None, occurrences)
Count = tuple[int, int | None, str, int | None, int]


def counts(ctx: EvalContext, window_s: float) -> list[Count]:
    """The occurrences within ``window_s`` of now per (node, GPU, kind, Xid), self-test events
    left out, read once per evaluation and window."""
    cache: dict[float, list[Count]] = ctx.cache.setdefault(_CACHE, {})
    if window_s not in cache:
        keys = (NodeEvent.node_id, NodeEvent.gpu_id, NodeEvent.kind, NodeEvent.xid)
        stmt = (
            select(*keys, func.count())
            .where(
                NodeEvent.occurred_at >= ctx.now - timedelta(seconds=window_s),
                NodeEvent.test.is_(False),  # the self-test pages through the health rules
            )
            .group_by(*keys)
        )
        if ctx.only_nodes is not None:
            stmt = stmt.where(NodeEvent.node_id.in_(sorted(ctx.only_nodes)))
        cache[window_s] = [tuple(row) for row in ctx.session.execute(stmt)]  # type: ignore[misc]
    return cache[window_s]


def incidents(ctx: EvalContext, window_s: float) -> list[Count]:
    """(node, GPU, kind, Xid, incident id) of the events in incidents within ``window_s`` of
    now, read once per evaluation and window (``app.incidents`` owns the grouping)."""
    cache: dict[float, list[Count]] = ctx.cache.setdefault(_INCIDENTS, {})
    if window_s not in cache:
        cache[window_s] = incidents_service.incident_keys(
            ctx.session,
            since=ctx.now - timedelta(seconds=window_s),
            node_ids=ctx.only_nodes,
        )
    return cache[window_s]


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of an event rule; ``value`` is the count within the window (occurrences,
    or distinct incidents with ``count: incidents``)."""
    cond = spec.condition
    assert isinstance(cond, EventCondition)
    kinds = None if "*" in cond.event_kinds else set(cond.event_kinds)
    xids = set(cond.xids) or None
    scoped = ctx.scoped_nodes(spec.scope)
    by_incident = cond.count == "incidents"
    rows = incidents(ctx, cond.window) if by_incident else counts(ctx, cond.window)
    per_entity: dict[tuple[int, int | None], int] = defaultdict(int)
    seen: dict[tuple[int, int | None], set[int]] = defaultdict(set)
    for node_id, gpu_id, kind, xid, n in rows:
        if kinds is not None and kind not in kinds:
            continue
        if xids is not None and xid not in xids:
            continue
        if scoped is not None and node_id not in scoped:
            continue
        key = (node_id, None if cond.per == "node" else gpu_id)
        if by_incident:
            seen[key].add(n)  # the incident id: each counts once per entity
        else:
            per_entity[key] += n
    if by_incident:
        per_entity.update((key, len(ids)) for key, ids in seen.items())
    out = []
    identity: tuple[str, ...]
    labels: dict[str, Any]
    for (node_id, gpu_id), n in sorted(per_entity.items(), key=_order):
        if n < cond.min_count or node_id not in ctx.nodes:
            continue
        node = ctx.nodes[node_id]
        gpu = None if gpu_id is None else ctx.gpu_anywhere(gpu_id)
        if gpu is not None:
            # The node the event happened on, even if the GPU has moved since: the same
            # labels, identity and scope whether the evaluation loaded that node alone or the
            # whole fleet.
            models = spec.scope.gpu_models
            if models and not any(fnmatch.fnmatchcase(gpu.name or "", p) for p in models):
                continue
            labels = ctx.gpu_labels_on(gpu, node_id)
            identity, entity = (node.hostname, gpu.uuid), f"{node.hostname} GPU {gpu.index}"
        else:
            if spec.scope.gpu_models:
                continue
            labels, identity, entity = ctx.node_labels(node_id), (node.hostname,), node.hostname
        out.append(Observation(labels, identity, float(n), True, entity))
    return out


def _order(item: tuple[tuple[int, int | None], int]) -> tuple[int, int]:
    (node_id, gpu_id), _ = item
    return node_id, -1 if gpu_id is None else gpu_id
