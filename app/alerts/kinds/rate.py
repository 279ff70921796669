"""Rate-of-change kind: how fast a cumulative counter rises, (newest − oldest value within the
window) ÷ their time apart, scaled to ``per`` (e.g. corrected ECC errors per hour). One sample,
a missing value, or a counter that went down (a reset) is no data. Computed for all rules of a
window at once by :mod:`app.alerts.kinds.shared`."""

from __future__ import annotations

from app.alerts.context import EvalContext, Observation
from app.alerts.kinds import shared
from app.alerts.kinds.threshold import observations
from app.alerts.spec import RateCondition, RuleSpec

PER_S = {"s": 1.0, "m": 60.0, "h": 3600.0}


def observe(ctx: EvalContext, spec: RuleSpec) -> list[Observation]:
    """Entities whose rate satisfies the comparison (plus no data unless ``no_data`` is ok)."""
    cond = spec.condition
    assert isinstance(cond, RateCondition)
    return observations(
        ctx,
        spec,
        cond.target,
        shared.values(ctx, cond),
        cond.op,
        cond.threshold,
        scale=PER_S[cond.per],
    )
