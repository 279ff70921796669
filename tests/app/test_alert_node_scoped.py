"""Node-scoped wake-ups: a batch that brings a change wakes the evaluator for its node only;
that evaluation reads and steps only that node's entities, leaving every other instance as it
was until an evaluation of the whole fleet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.alerts.scheduler import AlertEvaluator
from app.alerts.triggers import MAX_WAKE_NODES, parse_wake_payload, wake_payload
from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from app.health import current as health_current
from app.health import state as health_state
from app.health.rules import DEFAULT_RULES
from tests.dbs import wipe
from tests.factories import (
    add_rules,
    alert_states,
    batch,
    gpu,
    sample,
    store_payload,
    wait_until,
    wipe_alerts,
    xid_batch,
)

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
XID = {"kind": "event", "event_kinds": ["xid"], "xids": [79], "window": "10m"}
HOSTS = ("node-a", "node-b")


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    yield db_url
    wipe_alerts(db_url)
    wipe(db_url)


def _fleet(url: str) -> dict[str, int]:
    for hostname in HOSTS:
        store_payload(url, xid_batch(hostname, NOW), received_at=NOW)
    add_rules(url, {"name": "xid", "condition": XID})
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return {h: i for h, i in session.execute(select(Node.hostname, Node.id))}
    finally:
        engine.dispose()


def _states(url: str) -> dict[str, str]:
    return {entity.split("/")[0]: state for (_, entity), (state, _) in alert_states(url).items()}


def test_a_node_scoped_evaluation_steps_only_that_nodes_instances(url: str) -> None:
    ids = _fleet(url)
    engine = make_engine(url)
    evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
    try:
        report = evaluator.run_once(now=NOW, lane="event", nodes=[ids["node-a"]])
        assert report is not None and (report.rules, report.transitions) == (1, 1)
        assert _states(url) == {"node-a": "firing"}

        evaluator.run_once(now=NOW + timedelta(seconds=1), lane="event")
        assert _states(url) == {"node-a": "firing", "node-b": "firing"}

        # Both Xids are out of the window now; node-b alone is looked at: node-a keeps firing
        # (its entities were neither read nor stepped), node-b resolves.
        later = NOW + timedelta(minutes=11)
        report = evaluator.run_once(now=later, lane="event", nodes=[ids["node-b"]])
        assert report is not None and report.transitions == 1
        assert _states(url) == {"node-a": "firing", "node-b": "resolved"}

        evaluator.run_once(now=later + timedelta(seconds=1), lane="event")
        assert _states(url) == {"node-a": "resolved", "node-b": "resolved"}
    finally:
        evaluator.close()
        engine.dispose()


def test_an_xid_of_a_gpu_that_moved_since_stays_the_same_alert_in_every_evaluation(
    url: str,
) -> None:
    """The Xid happened on node-a; the card reports from node-b ten minutes later. Whole-fleet
    and node-scoped evaluations (either node) agree: one alert, on node-a, firing."""
    card = gpu(0, hostname="node-a")
    xid = xid_batch("node-a", NOW)
    store_payload(url, xid, received_at=NOW)
    later = NOW + timedelta(minutes=10)
    for hostname, cards in (("node-a", []), ("node-b", [gpu(1, hostname="node-b"), card])):
        moved = batch(hostname, gpus=cards, samples_per_gpu=0)
        moved["samples"] = [sample(g, later, temp_c=60) for g in cards]
        store_payload(url, moved, received_at=later)
    add_rules(url, {"name": "xid", "condition": {**XID, "window": "30m"}})
    engine = make_engine(url)
    evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
    try:
        with session_scope(make_session_factory(engine)) as session:
            ids = {h: i for h, i in session.execute(select(Node.hostname, Node.id))}
        runs: list[Any] = [None, [ids["node-b"]], None, [ids["node-a"]], None]
        for second, nodes in enumerate(runs):
            evaluator.run_once(now=later + timedelta(seconds=second), lane="event", nodes=nodes)
            assert alert_states(url) == {("xid", "node-a/0"): ("firing", 1.0)}, nodes
    finally:
        evaluator.close()
        engine.dispose()


@pytest.mark.parametrize("read_through_max", [1, 32])
def test_scoped_and_whole_fleet_evaluations_see_the_same_health_before_it_is_refreshed(
    url: str, monkeypatch: pytest.MonkeyPatch, read_through_max: int
) -> None:
    """A node's stored health is behind its newest batch (a GPU lost). Whether health is
    evaluated on read (few nodes behind) or the stored answers are served (more than
    READ_THROUGH_MAX behind: 1 here stands for a large fleet), the evaluation woken for that
    node and the whole-fleet tick agree."""
    monkeypatch.setattr(health_current, "READ_THROUGH_MAX", read_through_max)
    hosts = ("node-a", "node-b", "node-c")

    def one_gpu(hostname: str, at: datetime, **state: str) -> dict[str, Any]:
        g = gpu(0, hostname=hostname, **state)
        payload = batch(hostname, gpus=[g], samples_per_gpu=0)
        payload["samples"] = [sample(g, at, temp_c=60)]
        return payload

    for hostname in hosts:
        store_payload(url, one_gpu(hostname, NOW), received_at=NOW)
    rule = {"kind": "health", "target": "gpu", "states": ["unhealthy"]}
    add_rules(url, {"name": "gpu-unhealthy", "condition": rule})
    engine = make_engine(url)
    factory = make_session_factory(engine)
    evaluator = AlertEvaluator(engine, factory, health_rules=DEFAULT_RULES)
    try:
        with session_scope(factory) as session:
            ids = {h: i for h, i in session.execute(select(Node.hostname, Node.id))}
            health_state.refresh(session, rules=DEFAULT_RULES, now=NOW, node_ids=list(ids.values()))
        later = NOW + timedelta(seconds=10)
        lost = one_gpu("node-a", later, state="lost", state_reason="GPU has fallen off the bus")
        store_payload(url, lost, received_at=later)
        for hostname in hosts[1:]:
            store_payload(url, one_gpu(hostname, later), received_at=later)
        expected = {("gpu-unhealthy", "node-a/0"): ("firing", 3.0)} if read_through_max > 1 else {}

        evaluator.run_once(now=later, lane="event", nodes=[ids["node-a"]])
        assert alert_states(url) == expected
        evaluator.run_once(now=later + timedelta(seconds=1), lane="event")
        assert alert_states(url) == expected

        with session_scope(factory) as session:
            report = health_state.refresh(session, rules=DEFAULT_RULES, now=later)
        assert report.changed_ids == (ids["node-a"],)
        evaluator.run_once(now=later + timedelta(seconds=2), lane="event", nodes=[ids["node-a"]])
        assert alert_states(url) == {("gpu-unhealthy", "node-a/0"): ("firing", 3.0)}
    finally:
        evaluator.close()
        engine.dispose()


def test_a_wake_up_naming_a_node_evaluates_that_node_and_an_empty_payload_every_node(
    url: str,
) -> None:
    ids = _fleet(url)
    engine = make_engine(url)
    evaluator = AlertEvaluator(
        engine, make_session_factory(engine), health_rules=DEFAULT_RULES, debounce_s=0.05
    )
    evaluator.start()
    try:
        evaluator.wake([ids["node-b"]])
        assert wait_until(lambda: _states(url) == {"node-b": "firing"})
        time.sleep(0.5)
        assert _states(url) == {"node-b": "firing"}

        evaluator.wake_from_peer("")  # a peer's wake-up without nodes: the whole fleet
        assert wait_until(lambda: _states(url) == {"node-a": "firing", "node-b": "firing"})
    finally:
        evaluator.close()
        engine.dispose()


def test_a_peer_payload_names_nodes_and_anything_unexpected_means_every_node() -> None:
    assert wake_payload([3, 1, 2]) == "nodes:1,2,3"
    assert parse_wake_payload(wake_payload([3, 1, 2])) == {1, 2, 3}
    assert wake_payload(None) == ""
    assert wake_payload(range(MAX_WAKE_NODES + 1)) == ""
    assert parse_wake_payload("nodes:2147483647,1") == {1, 2147483647}
    odd_ids = ["2147483648", "9223372036854775808", "0", "-1", " 1", "+2", "1_0", "١", "01x"]
    for odd in (
        [f"nodes:3,{i}" for i in odd_ids]
        + ["", "nodes:", "nodes:1,x", "nodes:1;2"]
        + [
            "hosts:1",
            "nodes:" + "1," * 3,
        ]
    ):
        assert parse_wake_payload(odd) is None, odd
    too_many = "nodes:" + ",".join(str(i) for i in range(MAX_WAKE_NODES + 1))
    assert parse_wake_payload(too_many) is None
