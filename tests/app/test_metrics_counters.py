"""Fleetwatch's own metrics on ``/metrics``: the ingest's counters and latency, the rule
evaluation's duration, notifications by outcome (counted where each happens), and the nodes
per health state and firing alerts per severity (computed at the scrape), on Postgres and
SQLite. Counters are per process and shared by the tests: each test compares before/after."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.alerts.scheduler import AlertEvaluator
from app.db import make_engine, make_session_factory, session_scope
from app.exporter import counters
from app.health import state as health_state
from app.health.rules import DEFAULT_RULES
from app.notify.secrets import SecretBox
from tests.app.helpers import post_batch
from tests.app.metrics_helpers import scrape, value
from tests.app.test_notify_delivery import SECRET_PATH, Env, add_channel, drain, make_worker
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import (
    add_rules,
    batch,
    create_token,
    gpu,
    sample,
    store_payload,
    wipe_alerts,
    xid_batch,
)
from tests.live_server import LiveServer
from tests.notify_helpers import Alerts, receiver, wipe_notify

HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
NAME = "fleetwatch_rule_evaluation_duration_seconds"
STATES = ("healthy", "degraded", "unhealthy", "unknown")
SEVERITIES = ("critical", "warning", "info")
OUTCOMES = counters.NOTIFY_OUTCOMES


def counter(name: str, **labels: str) -> float:
    """This process's value of a ``fleetwatch_*`` sample (0 when never set)."""
    return counters.REGISTRY.get_sample_value(name, labels) or 0.0


def test_ingest_batches_are_counted_by_outcome_and_rejection_reason(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    text = scrape(server.url)
    before = {
        key: value(text, series) or 0.0
        for key, series in {
            "stored": 'fleetwatch_ingest_batches_total{outcome="stored"}',
            "replayed": 'fleetwatch_ingest_batches_total{outcome="replayed"}',
            "rejected": 'fleetwatch_ingest_batches_total{outcome="rejected"}',
            "unauthenticated": 'fleetwatch_ingest_rejections_total{reason="unauthenticated"}',
            "invalid": 'fleetwatch_ingest_rejections_total{reason="invalid"}',
            "future": 'fleetwatch_ingest_samples_rejected_total{reason="sampled_at_in_future"}',
            "latency": "fleetwatch_ingest_batch_duration_seconds_count",
        }.items()
    }
    g = gpu(0, hostname="node-a")
    payload = batch("node-a", gpus=[g], samples_per_gpu=1)
    payload["samples"].append(sample(g, datetime.now(UTC) + timedelta(hours=1)))
    assert post_batch(server.url, token, payload).status_code == 200
    assert post_batch(server.url, token, payload).json()["replayed"] is True
    assert post_batch(server.url, "fwt_wrong", batch("node-a")).status_code == 401
    assert post_batch(server.url, token, {"schema_version": 1}).status_code == 422
    text = scrape(server.url)
    assert value(text, 'fleetwatch_ingest_batches_total{outcome="stored"}') == before["stored"] + 1
    replayed = value(text, 'fleetwatch_ingest_batches_total{outcome="replayed"}')
    assert replayed == before["replayed"] + 1
    rejected = value(text, 'fleetwatch_ingest_batches_total{outcome="rejected"}')
    assert rejected == before["rejected"] + 2
    reason = 'fleetwatch_ingest_rejections_total{reason="unauthenticated"}'
    assert value(text, reason) == before["unauthenticated"] + 1
    assert value(text, 'fleetwatch_ingest_rejections_total{reason="invalid"}') == (
        before["invalid"] + 1
    )
    future = 'fleetwatch_ingest_samples_rejected_total{reason="sampled_at_in_future"}'
    assert value(text, future) == before["future"] + 1  # the replay's are not counted again
    latency = value(text, "fleetwatch_ingest_batch_duration_seconds_count")
    assert latency == before["latency"] + 2


@pytest.fixture
def url(db_url: str) -> Iterator[str]:
    yield db_url
    wipe_alerts(db_url)
    wipe(db_url)


def test_each_lanes_evaluation_is_timed_and_nodes_and_alerts_are_counted_at_the_scrape(
    url: str, tmp_path: Path
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    store_payload(url, xid_batch("node-a", now, temp_c=95), received_at=now)  # unhealthy
    store_payload(url, batch("node-b", gpus=1, samples_per_gpu=1), received_at=now)
    gone = now - timedelta(hours=1)
    store_payload(url, batch("node-c", gpus=1, samples_per_gpu=0), received_at=gone)  # stale
    add_rules(url, {"name": "hot", "severity": "critical", "condition": HOT})
    engine = make_engine(url)
    evaluator = AlertEvaluator(engine, make_session_factory(engine), health_rules=DEFAULT_RULES)
    timed = {lane: counter(f"{NAME}_count", lane=lane) for lane in counters.RULE_LANES}
    try:
        with session_scope(make_session_factory(engine)) as session:
            health_state.refresh(session, rules=DEFAULT_RULES, now=now)
        assert evaluator.run_once(now=now) is not None
    finally:
        evaluator.close()
        engine.dispose()
    assert {lane: counter(f"{NAME}_count", lane=lane) for lane in timed} == {
        lane: seen + 1 for lane, seen in timed.items()
    }
    # node-d has reported but is not evaluated yet: unknown until the refresher judged it.
    store_payload(url, batch("node-d", gpus=1, samples_per_gpu=1), received_at=now)
    server = LiveServer(make_settings(url, tmp_path))
    server.start()
    try:
        text = scrape(server.url)
    finally:
        server.stop()
    states = {s: value(text, f'fleetwatch_nodes{{state="{s}"}}') for s in STATES}
    assert states == {"healthy": 1, "degraded": 0, "unhealthy": 1, "unknown": 2}
    firing = {s: value(text, f'fleetwatch_alerts_firing{{severity="{s}"}}') for s in SEVERITIES}
    assert firing == {"critical": 1, "warning": 0, "info": 0}


def test_notifications_are_counted_by_outcome_once_recorded(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, notify_allow_hosts=["127.0.0.1"])
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    env = Env(settings, factory, SecretBox.from_settings(settings), Alerts(factory))
    before = {o: counter("fleetwatch_notifications_total", outcome=o) for o in OUTCOMES}
    try:
        with receiver() as hook:
            add_channel(env, hook.url + SECRET_PATH)
            env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
            env.alerts.transition("gpu-lost", "n2", "firing", from_state="pending")
            env.alerts.transition("gpu-lost", "n2", "firing", silenced=True)
            worker = make_worker(env)
            drain(env, worker)
            worker.close()
    finally:
        wipe_notify(db_url)
        engine.dispose()
    after = {o: counter("fleetwatch_notifications_total", outcome=o) for o in OUTCOMES}
    assert {o: after[o] - before[o] for o in OUTCOMES} == {
        "delivered": 1,
        "retried": 0,
        "failed": 0,
        "suppressed": 1,
    }
