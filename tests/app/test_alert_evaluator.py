"""The evaluator on stored data: transitions and their events written together, a restart in
the middle of ``for``, no re-notification, no-data handling, stale nodes, silences, disabling,
a broken rule, and two evaluator processes on one Postgres writing each transition once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text, update

from app.alerts import evaluator, store
from app.alerts import service as alert_service
from app.alerts.evaluator import evaluate
from app.alerts.models import AlertEvent, AlertInstance, AlertRule
from app.db import make_engine, make_session_factory, session_scope
from app.health.rules import DEFAULT_RULES
from tests.factories import (
    add_rules,
    alert_states,
    batch,
    evaluate_at,
    gpu,
    sample,
    store_payload,
    wipe_alerts,
)

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
HOT = {
    "kind": "threshold",
    "target": "gpu",
    "metric": "temp_c",
    "op": ">",
    "threshold": 85,
}


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    """``db_url`` with the alert tables wiped after the test."""
    yield db_url
    wipe_alerts(db_url)


def hot_batch(at: datetime, temp_c: float | None = 90, hostname: str = "node-a") -> dict[str, Any]:
    """One GPU of ``hostname`` at ``temp_c`` at ``at``."""
    g = gpu(0, hostname=hostname)
    payload = batch(hostname, gpus=[g], samples_per_gpu=0)
    payload["samples"] = [sample(g, at, temp_c=temp_c)]
    return payload


def events(url: str) -> list[tuple[str, str, float, bool]]:
    """(from, to, seconds after NOW, silenced) of every alert event, in order."""
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            rows = session.scalars(select(AlertEvent).order_by(AlertEvent.id))
            return [
                (e.from_state, e.to_state, (e.at - NOW).total_seconds(), e.silenced) for e in rows
            ]
    finally:
        engine.dispose()


def test_each_transition_writes_one_event_and_a_restart_keeps_the_for_timer(url: str) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    add_rules(url, {"name": "hot", "for": "30s", "condition": HOT})

    evaluate_at(url, NOW)  # pending
    evaluate_at(url, NOW + timedelta(seconds=10))
    # A restart: evaluate_at uses a new engine and session each time; nothing is in memory.
    store_payload(
        url, hot_batch(NOW + timedelta(seconds=25)), received_at=NOW + timedelta(seconds=25)
    )
    evaluate_at(url, NOW + timedelta(seconds=30))  # firing
    evaluate_at(url, NOW + timedelta(seconds=40))  # still firing: no new event

    assert events(url) == [
        ("inactive", "pending", 0.0, False),
        ("pending", "firing", 30.0, False),
    ]
    assert alert_states(url) == {("hot", "node-a/0"): ("firing", 90.0)}


def test_a_cleared_value_resolves_and_a_stale_node_resolves_without_a_no_data_storm(
    url: str,
) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    store_payload(url, hot_batch(NOW, hostname="node-b"), received_at=NOW)
    add_rules(
        url,
        {"name": "hot", "condition": HOT},
        {"name": "stale", "condition": {"kind": "absence", "target": "node", "after": "2m"}},
    )
    evaluate_at(url, NOW)
    later = NOW + timedelta(seconds=130)
    store_payload(url, hot_batch(later, temp_c=60), received_at=later)  # node-a cools down

    evaluate_at(url, later)  # node-b sent nothing for 130 s

    # A resolved instance keeps the last value it had while its condition held.
    assert alert_states(url) == {
        ("hot", "node-a/0"): ("resolved", 90.0),
        ("hot", "node-b/0"): ("resolved", 90.0),
        ("stale", "node-b"): ("firing", 130.0),
    }


def test_no_data_keep_holds_the_state_and_ok_resolves(url: str) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    add_rules(
        url,
        {"name": "keep", "no_data": "keep", "condition": HOT},
        {"name": "ok", "no_data": "ok", "condition": HOT},
    )
    evaluate_at(url, NOW)
    later = NOW + timedelta(seconds=20)
    store_payload(url, hot_batch(later, temp_c=None), received_at=later)

    evaluate_at(url, later)

    assert alert_states(url) == {
        ("keep", "node-a/0"): ("firing", None),
        ("ok", "node-a/0"): ("resolved", 90.0),
    }


def test_a_silence_marks_the_instance_and_its_event(url: str) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    store_payload(url, hot_batch(NOW, hostname="node-b"), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT})
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            alert_service.create_silence(
                session,
                matchers=[{"name": "hostname", "op": "=~", "value": "node-(a|c)"}],
                starts_at=NOW - timedelta(minutes=1),
                ends_at=NOW + timedelta(hours=1),
                created_by="alice",
                comment="maintenance",
            )
    finally:
        engine.dispose()

    evaluate_at(url, NOW)

    assert sorted(events(url)) == [
        ("inactive", "firing", 0.0, False),
        ("inactive", "firing", 0.0, True),
    ]
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            silenced = {
                i.labels["hostname"]: i.silenced for i in session.scalars(select(AlertInstance))
            }
    finally:
        engine.dispose()
    assert silenced == {"node-a": True, "node-b": False}


def test_disabling_a_rule_resolves_its_firing_alerts_with_an_event(url: str) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT})
    evaluate_at(url, NOW)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            store.set_enabled(session, name="hot", enabled=False)
    finally:
        engine.dispose()

    evaluate_at(url, NOW + timedelta(seconds=10))

    assert [(f, t) for f, t, _, _ in events(url)] == [
        ("inactive", "firing"),
        ("firing", "resolved"),
    ]
    assert alert_states(url) == {("hot", "node-a/0"): ("resolved", 90.0)}


def test_a_rule_whose_stored_spec_is_broken_fails_alone(url: str) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    add_rules(url, {"name": "a-broken", "condition": HOT}, {"name": "hot", "condition": HOT})
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            session.execute(
                update(AlertRule)
                .where(AlertRule.name == "a-broken")
                .values(spec={"name": "a-broken", "condition": {"kind": "nope"}})
            )
        with session_scope(make_session_factory(engine)) as session:
            report = evaluate(session, now=NOW, health_rules=DEFAULT_RULES)
    finally:
        engine.dispose()

    assert (report.rules, list(report.failed)) == (1, ["a-broken"])
    assert alert_states(url) == {("hot", "node-a/0"): ("firing", 90.0)}


def test_a_rule_failing_with_an_empty_message_is_reported_by_its_repr(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT}, {"name": "m-fails", "condition": HOT})
    real = evaluator.observe

    def failing(ctx: Any, spec: Any) -> Any:
        if spec.name == "m-fails":
            raise RuntimeError()
        return real(ctx, spec)

    monkeypatch.setattr(evaluator, "observe", failing)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            report = evaluate(session, now=NOW, health_rules=DEFAULT_RULES)
    finally:
        engine.dispose()

    assert (report.rules, report.failed) == (1, {"m-fails": "RuntimeError()"})


@pytest.mark.parametrize("phase", ["observe", "apply_rule"])
def test_a_rule_failing_in_the_database_fails_alone_and_the_others_write_once(
    url: str, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    store_payload(url, hot_batch(NOW), received_at=NOW)
    rules = [{"name": name, "condition": HOT} for name in ("hot", "m-fails", "z-hot")]
    add_rules(url, *rules)
    real = getattr(evaluator, phase)

    def failing(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)  # the rule's writes happen, then its transaction breaks
        spec = kwargs.get("spec", args[-1] if args else None)
        if spec.name == "m-fails":
            session = args[0].session if args else kwargs["session"]
            session.execute(text("SELECT * FROM no_such_table"))
        return result

    monkeypatch.setattr(evaluator, phase, failing)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            report = evaluate(session, now=NOW, health_rules=DEFAULT_RULES)
    finally:
        engine.dispose()

    assert (report.rules, list(report.failed)) == (2, ["m-fails"])
    assert alert_states(url) == {
        ("hot", "node-a/0"): ("firing", 90.0),
        ("z-hot", "node-a/0"): ("firing", 90.0),
    }
    assert [(f, t) for f, t, _, _ in events(url)] == [("inactive", "firing")] * 2


WORKER = """
import json, sys, time
from app.alerts.scheduler import AlertEvaluator
from app.db import make_engine, make_session_factory
from app.health.rules import DEFAULT_RULES
url, seconds = sys.argv[1], float(sys.argv[2])
engine = make_engine(url)
ev = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
ran, end = 0, time.monotonic() + seconds
print("started", flush=True)
while time.monotonic() < end:
    if ev.run_once() is not None:
        ran += 1
    time.sleep(0.05)
print(json.dumps({"ran": ran}), flush=True)
"""


def start_worker(url: str, seconds: float) -> subprocess.Popen[str]:
    """An evaluator process ticking every 50 ms for ``seconds``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    return proc


def ran(proc: subprocess.Popen[str]) -> int:
    """How many evaluations the worker ran."""
    out, _ = proc.communicate(timeout=60)
    return int(json.loads(out.strip().splitlines()[-1])["ran"])


def test_two_evaluator_processes_write_each_transition_exactly_once_and_one_takes_over(
    postgres_url: str,
) -> None:
    url = postgres_url
    try:
        now = datetime.now(UTC)
        store_payload(url, hot_batch(now), received_at=now)
        add_rules(url, {"name": "hot", "condition": HOT})
        first = start_worker(url, 3.0)
        second = start_worker(url, 8.0)
        ran_first = ran(first)  # exits after 3 s: its lock goes with its connection
        later = datetime.now(UTC)
        store_payload(url, hot_batch(later, hostname="node-b"), received_at=later)
        time.sleep(1.0)
        ran_second = ran(second)

        assert ran_first > 0 and ran_second > 0
        assert sorted((f, t) for f, t, _, _ in events(url)) == [
            ("inactive", "firing"),
            ("inactive", "firing"),
        ]
        assert {k: v[0] for k, v in alert_states(url).items()} == {
            ("hot", "node-a/0"): "firing",
            ("hot", "node-b/0"): "firing",
        }
    finally:
        wipe_alerts(url)
        from tests.dbs import wipe

        wipe(url)


def test_while_one_process_leads_the_other_evaluates_nothing(postgres_url: str) -> None:
    url = postgres_url
    leader = start_worker(url, 3.0)
    engine = make_engine(url)
    try:
        time.sleep(0.5)
        from app.alerts.scheduler import AlertEvaluator

        other = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
        assert other.run_once() is None
        assert not other.is_leader
        from app.alerts.scheduler import LEADER_KEY

        with engine.connect() as conn:
            # Only the leadership key: the leader also holds the evaluation key while a run is
            # in flight (every 50 ms here), which a count of all advisory locks would catch.
            holders = conn.scalar(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND classid = :high AND objid = :low AND objsubid = 1"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                ),
                {"high": LEADER_KEY >> 32, "low": LEADER_KEY & 0xFFFFFFFF},
            )
        assert holders == 1
    finally:
        engine.dispose()
        assert ran(leader) > 0


def test_the_scheduler_evaluates_on_sqlite_reading_before_it_takes_the_write_lock(
    sqlite_url: str,
) -> None:
    from app.alerts.scheduler import AlertEvaluator
    from tests.dbs import wipe

    url = sqlite_url
    engine = make_engine(url)
    try:
        store_payload(url, hot_batch(NOW), received_at=NOW)
        add_rules(url, {"name": "hot", "for": "10s", "condition": HOT})
        evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)

        first = evaluator.run_once(now=NOW)
        second = evaluator.run_once(now=NOW + timedelta(seconds=10))

        assert evaluator.is_leader
        assert (first and first.transitions, second and second.transitions) == (1, 1)
        assert [(f, t) for f, t, _, _ in events(url)] == [
            ("inactive", "pending"),
            ("pending", "firing"),
        ]
    finally:
        engine.dispose()
        wipe_alerts(url)
        wipe(url)


def _instance(url: str) -> tuple[str, str, bool, float | None, str | None]:
    """(state, summary, silenced, value, last_active_at ISO) of the only alert instance."""
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            inst = session.scalars(select(AlertInstance)).one()
            last = inst.last_active_at.isoformat() if inst.last_active_at else None
            return inst.state, inst.summary, inst.silenced, inst.value, last
    finally:
        engine.dispose()


def test_a_steady_instance_takes_silences_at_once_and_values_and_texts_once_a_minute(
    url: str,
) -> None:
    """A steady instance is left unwritten unless something changed (``evaluator._unchanged``):
    its state and silencing are written at once, its value and texts at most once per
    ``VALUE_REFRESH_S`` (60 s)."""
    assert evaluator.VALUE_REFRESH_S == 60.0
    store_payload(url, hot_batch(NOW), received_at=NOW)
    add_rules(url, {"name": "hot", "for": "30s", "summary": "hot {value}", "condition": HOT})
    evaluate_at(url, NOW)
    assert _instance(url)[:4] == ("pending", "hot 90", False, 90.0)

    evaluate_at(url, NOW + timedelta(seconds=10))  # steady pending: nothing to write
    assert _instance(url)[:4] == ("pending", "hot 90", False, 90.0)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            rule = store.get_rule(session, name="hot")
            spec = store.spec_of(rule).model_copy(update={"summary": "still hot at {value}"})
            store.update_rule(session, name="hot", spec=spec)
    finally:
        engine.dispose()
    evaluate_at(url, NOW + timedelta(seconds=20))  # the new text waits for its refresh …
    assert _instance(url)[:4] == ("pending", "hot 90", False, 90.0)
    evaluate_at(url, NOW + timedelta(seconds=30))  # … or a transition: ``for`` ran out
    assert _instance(url)[:4] == ("firing", "still hot at 90", False, 90.0)

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            alert_service.create_silence(
                session,
                matchers=[{"name": "alertname", "op": "=", "value": "hot"}],
                starts_at=NOW,
                ends_at=NOW + timedelta(hours=1),
                created_by="alice",
                comment="known",
            )
    finally:
        engine.dispose()
    evaluate_at(url, NOW + timedelta(seconds=40))  # a silence: at once
    assert _instance(url)[:4] == ("firing", "still hot at 90", True, 90.0)

    store_payload(url, hot_batch(NOW + timedelta(seconds=45), 95), received_at=NOW)
    evaluate_at(url, NOW + timedelta(seconds=50))  # 20 s after the last write: waits
    assert _instance(url)[:4] == ("firing", "still hot at 90", True, 90.0)
    evaluate_at(url, NOW + timedelta(seconds=90))  # 60 s after it: refreshed
    assert _instance(url)[:4] == ("firing", "still hot at 95", True, 95.0)
    # Without keep_firing_for the steady instance's last_active_at is not rewritten.
    assert _instance(url)[4] == (NOW + timedelta(seconds=30)).isoformat()
