"""The evaluator's two lanes: every rule in exactly one, a tick runs both, and a wake-up (the
event-driven lane) is not held back by a long pass of the timer lane on Postgres."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from app.alerts.rulefiles import DEFAULT_RULES_DIR, load_path
from app.alerts.scheduler import EVAL_TIMER_KEY, LANES, AlertEvaluator
from app.db import make_engine, make_session_factory
from app.health.rules import DEFAULT_RULES
from tests.dbs import wipe
from tests.factories import add_rules, alert_states, store_payload, wipe_alerts, xid_batch

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
XID = {"kind": "event", "event_kinds": ["xid"], "xids": [79], "window": "10m"}


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    yield db_url
    wipe_alerts(db_url)
    wipe(db_url)


def _hot_batch_with_xid(at: datetime) -> dict[str, Any]:
    return xid_batch("node-a", at, temp_c=95)


def test_every_default_rule_is_in_exactly_one_lane() -> None:
    specs = [spec for spec, _ in load_path(DEFAULT_RULES_DIR)]
    lanes = [[name for name, (_, accepts) in LANES.items() if accepts(spec)] for spec in specs]
    assert all(len(found) == 1 for found in lanes)
    assert {found[0] for found in lanes} == {"event", "timer"}


def test_a_tick_runs_both_lanes_and_a_wake_up_only_the_event_driven_one(url: str) -> None:
    store_payload(url, _hot_batch_with_xid(NOW), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT}, {"name": "xid", "condition": XID})
    engine = make_engine(url)
    evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
    try:
        woken = evaluator.run_once(now=NOW + timedelta(seconds=5), lane="event")
        assert woken is not None and (woken.rules, woken.transitions) == (1, 1)
        assert set(alert_states(url)) == {("xid", "node-a/0")}

        tick = evaluator.run_once(now=NOW + timedelta(seconds=10))

        assert tick is not None and (tick.rules, tick.transitions) == (2, 1)
        assert set(alert_states(url)) == {("xid", "node-a/0"), ("hot", "node-a/0")}
        with pytest.raises(KeyError):
            evaluator.run_once(lane="nope")
    finally:
        evaluator.close()  # gives up leadership: the next test's evaluator leads
        engine.dispose()


def test_a_wake_up_fires_while_a_timer_pass_holds_its_lock(postgres_url: str) -> None:
    url = postgres_url
    store_payload(url, _hot_batch_with_xid(NOW), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT}, {"name": "xid", "condition": XID})
    engine = make_engine(url)
    holder = engine.connect()
    evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
    try:
        # Another evaluation of the timer lane in flight (a long windowed pass).
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": EVAL_TIMER_KEY})
        done = threading.Event()
        woken: list[Any] = []

        def wake() -> None:
            woken.append(evaluator.run_once(now=NOW + timedelta(seconds=5), lane="event"))
            done.set()

        threading.Thread(target=wake, daemon=True).start()
        assert done.wait(timeout=20)
        assert woken[0] is not None and woken[0].transitions == 1
        assert set(alert_states(url)) == {("xid", "node-a/0")}

        blocked = threading.Event()

        def tick() -> None:
            evaluator.run_once(now=NOW + timedelta(seconds=10), lane="timer")
            blocked.set()

        threading.Thread(target=tick, daemon=True).start()
        assert not blocked.wait(timeout=1.0)  # the timer lane waits for the pass in flight
        holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": EVAL_TIMER_KEY})
        assert blocked.wait(timeout=20)
        assert set(alert_states(url)) == {("xid", "node-a/0"), ("hot", "node-a/0")}
    finally:
        evaluator.close()
        holder.close()
        engine.dispose()
        wipe_alerts(url)
        wipe(url)
