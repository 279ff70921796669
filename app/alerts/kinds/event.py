"""Event kind: at least ``min_count`` stored events of the rule's kinds (and Xids) whose
``occurred_at`` is within ``window`` of now, per GPU (per node for events naming no GPU). Each
stored occurrence is a row of ``node_event``, so a repeated Xid counts every time."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import EventCondition, RuleSpec
from app.events.models import NodeEvent


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of an event rule; ``value`` is the count within the window."""
    cond = spec.condition
    assert isinstance(cond, EventCondition)
    count = func.count().label("n")
    stmt = select(NodeEvent.node_id, NodeEvent.gpu_id, count).where(
        NodeEvent.occurred_at >= ctx.now - timedelta(seconds=cond.window)
    )
    if "*" not in cond.event_kinds:
        stmt = stmt.where(NodeEvent.kind.in_(cond.event_kinds))
    if cond.xids:
        stmt = stmt.where(NodeEvent.xid.in_(cond.xids))
    scoped = ctx.scoped_nodes(spec.scope)
    if scoped is not None:
        stmt = stmt.where(NodeEvent.node_id.in_(sorted(scoped)))
    stmt = stmt.group_by(NodeEvent.node_id, NodeEvent.gpu_id).having(count >= cond.min_count)
    out = []
    identity: tuple[str, ...]
    for node_id, gpu_id, n in ctx.session.execute(stmt):
        node = ctx.nodes[node_id]
        if gpu_id is not None and gpu_id in ctx.gpus:
            if not ctx.gpu_in(spec.scope, gpu_id):
                continue
            labels, identity = ctx.gpu_labels(gpu_id), (node.hostname, ctx.gpus[gpu_id].uuid)
            entity = ctx.gpu_entity(gpu_id)
        else:
            if spec.scope.gpu_models:
                continue
            labels, identity, entity = ctx.node_labels(node_id), (node.hostname,), node.hostname
        out.append(Observation(labels, identity, float(n), True, entity))
    return out
