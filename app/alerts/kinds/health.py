"""Health kind: a node or GPU whose ``app.health`` state is one of the rule's states (and, when
``codes`` are given, has a reason with one of those codes). Fleet health is read once per
evaluation and shared by every health rule, indexed by target and state: a rule looks only at
the entities in its states (a healthy fleet of 8,000 GPUs is not walked once per rule)."""

from __future__ import annotations

from dataclasses import dataclass

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import HealthCondition, RuleSpec
from app.health import actions
from app.health.rules import SEVERITY, State
from app.health.schemas import ActionOut

_CACHE = "health_index"


@dataclass(frozen=True)
class Entry:
    """One node (``gpu_id`` None) or GPU not healthy, with its reason codes."""

    hostname: str
    node_id: int
    gpu_id: int | None
    uuid: str | None
    state: State
    codes: tuple[str, ...]
    actions: tuple[ActionOut | None, ...]
    #: Per reason: found only from self-test events.
    tests: tuple[bool, ...] = ()


def index(ctx: EvalContext) -> dict[tuple[str, str], list[Entry]]:
    """(target, state value) → the entries in that state, by hostname then GPU order, built
    once per evaluation from :meth:`EvalContext.health`."""
    if _CACHE in ctx.cache:
        cached: dict[tuple[str, str], list[Entry]] = ctx.cache[_CACHE]
        return cached
    by_host = {n.hostname: n for n in ctx.nodes.values()}
    uuids = {g.uuid: g.id for g in ctx.gpus.values()}
    out: dict[tuple[str, str], list[Entry]] = {}
    for hostname, health in sorted(ctx.health().items()):
        node = by_host.get(hostname)
        if node is None:
            continue
        codes = tuple(r.code for r in health.reasons)
        acts = tuple(r.action for r in health.reasons)
        tests = tuple(r.test for r in health.reasons)
        entry = Entry(hostname, node.id, None, None, health.state, codes, acts, tests)
        out.setdefault(("node", health.state.value), []).append(entry)
        for gpu in health.gpus:
            gpu_id = uuids.get(gpu.uuid)
            if gpu_id is None:
                continue
            codes = tuple(r.code for r in gpu.reasons)
            acts = tuple(r.action for r in gpu.reasons)
            tests = tuple(r.test for r in gpu.reasons)
            entry = Entry(hostname, node.id, gpu_id, gpu.uuid, gpu.state, codes, acts, tests)
            out.setdefault(("gpu", gpu.state.value), []).append(entry)
    ctx.cache[_CACHE] = out
    return out


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of a health rule; ``value`` is the state's rank (healthy 0, degraded 1,
    unknown 2, unhealthy 3). An entity matched only by self-test reasons is labelled
    ``test: "true"``."""
    cond = spec.condition
    assert isinstance(cond, HealthCondition)
    entries = index(ctx)
    found = [e for state in cond.states for e in entries.get((cond.target, state), [])]
    found.sort(key=lambda e: (e.hostname, -1 if e.gpu_id is None else e.gpu_id))
    out = []
    identity: tuple[str, ...]
    for e in found:
        if not cond.matches(e.codes):
            continue
        if e.gpu_id is None:
            if not ctx.node_in(spec.scope, e.node_id):
                continue
            labels, identity, entity = ctx.node_labels(e.node_id), (e.hostname,), e.hostname
        else:
            if not ctx.node_in(spec.scope, e.node_id) or not ctx.gpu_in(spec.scope, e.gpu_id):
                continue
            assert e.uuid is not None
            labels = ctx.gpu_labels(e.gpu_id)
            identity, entity = (e.hostname, e.uuid), ctx.gpu_entity(e.gpu_id)
        chosen = [a for c, a in zip(e.codes, e.actions, strict=True) if cond.matches((c,))]
        picked = [t for c, t in zip(e.codes, e.tests, strict=True) if cond.matches((c,))]
        # Only self-test reasons: a test alert of its own (labelled, so a real fault of the
        # same entity later is another alert), its texts marked TEST (app.alerts.evaluator).
        marks = {"test": "true"} if picked and all(picked) else {}
        out.append(
            Observation(
                {**labels, "health": e.state.value, **marks},
                identity,
                float(SEVERITY[e.state]),
                True,
                entity,
                actions.sentence(actions.strongest(chosen)),
            )
        )
    return out
