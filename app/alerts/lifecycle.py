"""The alert state machine, pure: previous state + this evaluation's condition + rule timing +
now → next state, and the transition if the state changed.

Prometheus semantics: a true condition makes an instance ``pending``, and ``firing`` once it
has held for ``for`` (at once when ``for`` is 0); a false condition drops a pending instance
(``inactive``) and resolves a firing one unless it was true within ``keep_firing_for``. No data
is decided by the rule's ``no_data`` before this runs (``None`` here means "keep": nothing
changes, timers included).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

AlertState = Literal["inactive", "pending", "firing", "resolved"]


@dataclass(frozen=True)
class InstanceState:
    """What the state machine remembers of an instance (persisted on ``alert_instance``)."""

    state: AlertState = "inactive"
    active_since: datetime | None = None
    last_active_at: datetime | None = None
    fired_at: datetime | None = None
    resolved_at: datetime | None = None


@dataclass(frozen=True)
class Timing:
    """A rule's ``for`` and ``keep_firing_for``, seconds."""

    for_s: float = 0.0
    keep_firing_for_s: float = 0.0


@dataclass(frozen=True)
class Transition:
    """A change of state at ``at``."""

    from_state: AlertState
    to_state: AlertState
    at: datetime


def step(
    prev: InstanceState, *, condition: bool | None, timing: Timing, now: datetime
) -> tuple[InstanceState, Transition | None]:
    """The next state of an instance. ``condition`` None leaves everything as it was."""
    if condition is None:
        return prev, None
    if condition:
        if prev.state in ("inactive", "resolved"):
            started = replace(prev, active_since=now, last_active_at=now, resolved_at=None)
            if timing.for_s <= 0:
                return _to(started, "firing", now, fired_at=now)
            return _to(started, "pending", now)
        # Not dataclasses.replace: this is the steady path of every pending and firing
        # instance each tick.
        held = InstanceState(prev.state, prev.active_since, now, prev.fired_at, prev.resolved_at)
        if prev.state == "pending":
            since = prev.active_since or now
            if now - since >= timedelta(seconds=timing.for_s):
                return _to(held, "firing", now, fired_at=now)
        return held, None
    if prev.state == "pending":
        return _to(replace(prev, active_since=None), "inactive", now)
    if prev.state == "firing":
        last = prev.last_active_at or now
        if now - last < timedelta(seconds=timing.keep_firing_for_s):
            return prev, None
        return _to(replace(prev, active_since=None), "resolved", now, resolved_at=now)
    return prev, None


def _to(
    state: InstanceState,
    to: AlertState,
    now: datetime,
    *,
    fired_at: datetime | None = None,
    resolved_at: datetime | None = None,
) -> tuple[InstanceState, Transition]:
    new = replace(
        state,
        state=to,
        fired_at=fired_at if fired_at is not None else state.fired_at,
        resolved_at=resolved_at if resolved_at is not None else state.resolved_at,
    )
    return new, Transition(state.state, to, now)
