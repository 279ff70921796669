"""How far back a rule reads, against how long the server keeps what it reads.

A threshold or rate rule over a 10-day window on a server that keeps raw samples for 7 days
would silently judge 7 days; an event rule over 60 days with events kept 30 would count half
of them. Such a rule is refused where it is written (API, rules page, rule files) with the
field and the setting that bounds it, and a stored one (the retention shortened since) is
named at start-up.

What is kept: raw samples and their blocks for ``raw_retention_days``
(``FLEETWATCH_RAW_RETENTION_DAYS``; windows read them, :mod:`app.series.read`), events and
incidents for ``retention_days`` (``FLEETWATCH_RETENTION_DAYS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.alerts import store
from app.alerts.spec import (
    AbsenceCondition,
    EventCondition,
    RateCondition,
    RuleSpec,
    ThresholdCondition,
)
from app.alerts.template_values import duration
from app.errors import Conflict


@dataclass(frozen=True)
class Kept:
    """How long the server keeps what rules read.

    Attributes:
        samples_s: raw samples (and their blocks), seconds.
        events_s: events and incidents, seconds.
    """

    samples_s: float
    events_s: float

    @classmethod
    def of(cls, settings: Any) -> Kept:
        """From :class:`app.config.Settings` (``raw_retention_days``, ``retention_days``)."""
        return cls(settings.raw_retention_days * 86400.0, settings.retention_days * 86400.0)


_SAMPLES = "FLEETWATCH_RAW_RETENTION_DAYS"
_EVENTS = "FLEETWATCH_RETENTION_DAYS"


def beyond(spec: RuleSpec, kept: Kept) -> list[tuple[tuple[str, ...], str]]:
    """Each field of ``spec`` that reaches further back than ``kept``, as (location in the
    rule document, message naming the setting); empty when the rule reads only what is kept.

    Threshold (not ``last``, not of target ``node``: those read the inventory) and rate
    windows and a metric absence's ``after`` read raw samples; event windows read events (or
    incidents, with ``count: incidents``)."""
    cond = spec.condition
    if isinstance(cond, RateCondition) or (
        # A node threshold reads the inventory (missing, lost GPUs, clock skew), not samples.
        isinstance(cond, ThresholdCondition)
        and cond.target != "node"
        and cond.aggregation != "last"
    ):
        reach, field, what = float(cond.window), "window", "raw samples"
    elif isinstance(cond, AbsenceCondition) and cond.target == "metric" and cond.after:
        reach, field, what = float(cond.after), "after", "raw samples"
    elif isinstance(cond, EventCondition):
        reach, field = float(cond.window), "window"
        what = "incidents" if cond.count == "incidents" else "events"
    else:
        return []
    kept_s, setting = (
        (kept.samples_s, _SAMPLES) if what == "raw samples" else (kept.events_s, _EVENTS)
    )
    if reach <= kept_s:
        return []
    said, limit = duration(reach), duration(kept_s)
    if said == limit:  # close enough to round alike: say the seconds
        said, limit = f"{reach:.12g} s", f"{kept_s:.12g} s"
    message = (
        f"{field} {said} reaches back further than {what} are kept "
        f"({setting}={kept_s / 86400:g}, {limit}): shorten it or keep them longer"
    )
    return [(("condition", field), message)]


def describe(spec: RuleSpec, kept: Kept) -> list[str]:
    """:func:`beyond` as lines naming the rule and the field: ``rule <name>:
    condition.window: …``."""
    return [f"rule {spec.name}: {'.'.join(loc)}: {msg}" for loc, msg in beyond(spec, kept)]


def stored_beyond(session: Session, kept: Kept) -> list[str]:
    """:func:`describe` of every enabled stored rule (a retention shortened after the rule was
    written): the lines the server logs at start-up."""
    return [
        line
        for rule in store.list_rules(session)
        if rule.enabled
        for line in describe(store.spec_of(rule), kept)
    ]


def check_enabling(session: Session, *, name: str, kept: Kept) -> None:
    """Refuse to enable stored rule ``name`` while it reads further back than ``kept`` (a
    disabled rule written before the retention was shortened).

    Raises:
        NotFound: no such rule.
        Conflict: the rule reaches too far, naming the field and the setting.
    """
    far = describe(store.spec_of(store.get_rule(session, name=name)), kept)
    if far:
        raise Conflict(f"cannot enable it: {'; '.join(far)}. Edit the rule first.")
