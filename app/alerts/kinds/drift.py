"""Drift kind: a node with topology drift findings (``app.topology.drift.find_drift``), one
instance per node; ``value`` is the number of findings, the ``drift`` label their details."""

from __future__ import annotations

from collections import defaultdict

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import DriftCondition, RuleSpec


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Observations of a drift rule (see the module doc)."""
    cond = spec.condition
    assert isinstance(cond, DriftCondition)
    by_host = {n.hostname: n for n in ctx.nodes.values()}
    found: dict[str, list[str]] = defaultdict(list)
    for finding in ctx.drift():
        if not cond.drift_kinds or finding.kind in cond.drift_kinds:
            found[finding.hostname].append(finding.detail)
    out = []
    for hostname, details in sorted(found.items()):
        node = by_host.get(hostname)
        if node is None or not ctx.node_in(spec.scope, node.id):
            continue
        labels = {**ctx.node_labels(node.id), "drift": "; ".join(details)}
        out.append(Observation(labels, (hostname,), float(len(details)), True, hostname))
    return out
