"""The alert state machine with a controllable clock (pure, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.alerts.lifecycle import InstanceState, Timing, Transition, step

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def run(
    conditions: list[bool | None], timing: Timing, *, every_s: float = 10.0
) -> list[tuple[float, str, str]]:
    """Feed one condition per evaluation (``every_s`` apart); the transitions as
    (seconds after T0, from, to)."""
    state, out = InstanceState(), []
    for i, cond in enumerate(conditions):
        now = T0 + timedelta(seconds=i * every_s)
        state, tr = step(state, condition=cond, timing=timing, now=now)
        if tr is not None:
            out.append(((tr.at - T0).total_seconds(), tr.from_state, tr.to_state))
    return out


def test_it_goes_pending_then_firing_after_for_then_resolves() -> None:
    got = run([True, True, True, True, False], Timing(for_s=30))

    assert got == [
        (0, "inactive", "pending"),
        (30, "pending", "firing"),
        (40, "firing", "resolved"),
    ]


def test_a_rule_without_for_fires_at_the_first_true_evaluation() -> None:
    assert run([True, False], Timing()) == [(0, "inactive", "firing"), (10, "firing", "resolved")]


def test_keep_firing_for_holds_a_firing_alert_after_the_condition_clears() -> None:
    got = run([True, False, False, False, False], Timing(keep_firing_for_s=25))

    # Last true at 0 s: still firing at 10 and 20 (< 25 s), resolved at 30.
    assert got == [(0, "inactive", "firing"), (30, "firing", "resolved")]


def test_keep_firing_for_restarts_when_the_condition_returns() -> None:
    got = run([True, False, True, False, False, False], Timing(keep_firing_for_s=25))

    assert got == [(0, "inactive", "firing"), (50, "firing", "resolved")]


def test_a_flapping_condition_shorter_than_for_never_fires() -> None:
    got = run([True, False, True, False, True, False], Timing(for_s=15))

    assert got == [
        (0, "inactive", "pending"),
        (10, "pending", "inactive"),
        (20, "inactive", "pending"),
        (30, "pending", "inactive"),
        (40, "inactive", "pending"),
        (50, "pending", "inactive"),
    ]


def test_a_pending_timer_restarts_after_the_condition_breaks() -> None:
    got = run([True, True, False, True, True, True, True], Timing(for_s=30))

    assert got == [
        (0, "inactive", "pending"),
        (20, "pending", "inactive"),
        (30, "inactive", "pending"),
        (60, "pending", "firing"),
    ]


def test_no_data_kept_changes_nothing_not_even_timers() -> None:
    state = InstanceState("firing", T0, T0, T0, None)

    new, tr = step(state, condition=None, timing=Timing(), now=T0 + timedelta(hours=1))

    assert (new, tr) == (state, None)


def test_a_pending_timer_survives_a_restart_through_the_persisted_state() -> None:
    timing = Timing(for_s=60)
    state, _ = step(InstanceState(), condition=True, timing=timing, now=T0)
    # "Restart": only the persisted fields are carried over.
    restored = InstanceState(
        state.state, state.active_since, state.last_active_at, state.fired_at, state.resolved_at
    )

    mid, tr_mid = step(restored, condition=True, timing=timing, now=T0 + timedelta(seconds=50))
    end, tr_end = step(mid, condition=True, timing=timing, now=T0 + timedelta(seconds=60))

    assert (mid.state, tr_mid) == ("pending", None)
    assert tr_end == Transition("pending", "firing", T0 + timedelta(seconds=60))
    assert end.fired_at == T0 + timedelta(seconds=60)


def test_a_resolved_alert_fires_again_as_a_new_episode() -> None:
    got = run([True, False, True], Timing())

    assert got == [
        (0, "inactive", "firing"),
        (10, "firing", "resolved"),
        (20, "resolved", "firing"),
    ]
