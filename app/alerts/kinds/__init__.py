"""One module per rule kind, each turning a rule into per-entity observations; ``observe``
dispatches on the condition's ``kind``."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from app.alerts.context import EvalContext, Observation
from app.alerts.spec import RuleSpec

OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


def compare(value: float | None, op: str, threshold: float) -> bool | None:
    """``value op threshold``; None (no data) when ``value`` is None or NaN — a value that is
    not there never satisfies a comparison, whichever way it points."""
    if value is None or value != value:
        return None
    return bool(OPERATORS[op](value, threshold))


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """The rule's observations: entities whose condition holds or that have no data. An entity
    left out has its condition false (or is out of scope or gone)."""
    from app.alerts.kinds import absence, drift, event, health, rate, threshold

    kinds = {
        "threshold": threshold.observe,
        "rate": rate.observe,
        "absence": absence.observe,
        "event": event.observe,
        "health": health.observe,
        "drift": drift.observe,
    }
    return kinds[spec.condition.kind](ctx, spec)
