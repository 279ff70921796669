"""Health kind: a node or GPU whose ``app.health`` state is one of the rule's states (and, when
``codes`` are given, has a reason with one of those codes). Fleet health is computed once per
evaluation and shared by every health rule."""

from __future__ import annotations

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import HealthCondition, RuleSpec
from app.health.rules import SEVERITY, State


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of a health rule; ``value`` is the state's rank (healthy 0, degraded 1,
    unknown 2, unhealthy 3)."""
    cond = spec.condition
    assert isinstance(cond, HealthCondition)
    by_host = {n.hostname: n for n in ctx.nodes.values()}
    if "gpu_by_uuid" not in ctx.cache:
        ctx.cache["gpu_by_uuid"] = {g.uuid: g.id for g in ctx.gpus.values()}
    uuids: dict[str, int] = ctx.cache["gpu_by_uuid"]
    out = []
    for hostname, health in sorted(ctx.health().items()):
        node = by_host.get(hostname)
        if node is None or not ctx.node_in(spec.scope, node.id):
            continue
        if cond.target == "node":
            if _matches(health.state, [r.code for r in health.reasons], cond):
                out.append(
                    Observation(
                        {**ctx.node_labels(node.id), "health": health.state.value},
                        (hostname,),
                        float(SEVERITY[health.state]),
                        True,
                        hostname,
                    )
                )
            continue
        for gpu in health.gpus:
            gpu_id = uuids.get(gpu.uuid)
            if gpu_id is None or not ctx.gpu_in(spec.scope, gpu_id):
                continue
            if _matches(gpu.state, [r.code for r in gpu.reasons], cond):
                out.append(
                    Observation(
                        {**ctx.gpu_labels(gpu_id), "health": gpu.state.value},
                        (hostname, gpu.uuid),
                        float(SEVERITY[gpu.state]),
                        True,
                        ctx.gpu_entity(gpu_id),
                    )
                )
    return out


def _matches(state: State, codes: list[str], cond: HealthCondition) -> bool:
    if state.value not in cond.states:
        return False
    return not cond.codes or any(c in cond.codes for c in codes)
