"""Fault to chat without waiting for the timers: an Xid 79 batch stored over HTTP wakes the
alert evaluator, whose commit of the outbox rows wakes the delivery worker. The evaluation and
worker intervals are 60 s here, so only the wake-ups can explain a message within seconds; with
two servers on one Postgres the alert is evaluated and sent once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from app.alerts.models import AlertEvent
from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope
from app.notify import service as notify_service
from app.notify.schemas import ChannelIn, RouteIn
from app.notify.secrets import SecretBox
from tests.app.helpers import post_batch
from tests.app.section_factories import nvlinks
from tests.conftest import make_settings
from tests.factories import add_rules, batch, create_token, gpu, iso
from tests.live_server import LiveServer
from tests.notify_helpers import Receiver, receiver, wipe_notify

LONG_S = 60.0  # evaluation and worker intervals: far beyond every wait below
XID_RULE = {
    "name": "gpu-critical-xid",
    "severity": "critical",
    "summary": "Xid on {hostname} GPU {gpu_index}",
    "condition": {"kind": "event", "event_kinds": ["xid"], "xids": [79], "window": "10m"},
}

THROTTLE_RULE = {
    "name": "gpu-throttle-event",
    "severity": "critical",
    "summary": "Thermal throttling on {hostname}",
    "condition": {"kind": "event", "event_kinds": ["thermal_throttle"], "window": "10m"},
}
NVLINK_RULE = {
    "name": "gpu-nvlink-down",
    "severity": "critical",
    "summary": "NVLink down on {hostname} GPU {gpu_index}",
    "condition": {
        "kind": "health",
        "target": "gpu",
        "states": ["unhealthy"],
        "codes": ["nvlink_down"],
    },
}


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


def alerting(url: str, tmp: Path, hook: Receiver) -> Settings:
    """Settings with long intervals, the Xid rule, and a webhook channel with a route for
    critical alerts only (its group wait left to the default)."""
    wipe_notify(url)
    add_rules(url, XID_RULE, THROTTLE_RULE)
    settings = make_settings(
        url,
        tmp,
        alert_eval_interval_s=LONG_S,
        notify_worker_interval_s=LONG_S,
        notify_allow_hosts=["127.0.0.1"],
    )
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            channel = notify_service.create_channel(
                session,
                data=ChannelIn(name="ops", kind="webhook", url=hook.url + "/hook"),
                box=SecretBox.from_settings(settings),
                allow_hosts=["127.0.0.1"],
            )
            route = notify_service.create_route(
                session, data=RouteIn(channel_id=channel.id, severities=["critical"])
            )
            assert route.group_wait_s == 0.0
    finally:
        engine.dispose()
    return settings


def xid_batch(hostname: str, kind: str = "xid") -> dict[str, Any]:
    """A batch with one event of GPU 0: Xid 79, or ``kind`` without an Xid."""
    g = gpu(0, hostname=hostname)
    event: dict[str, Any] = {"occurred_at": iso(datetime.now(UTC)), "kind": kind}
    event["gpu_uuid"] = g["uuid"]
    if kind == "xid":
        event["xid"] = 79
    return batch(hostname, gpus=[g], samples_per_gpu=1, events=[event])


def firing_alerts(hook: Receiver) -> list[dict[str, Any]]:
    return [a for body in hook.bodies() for a in body["alerts"] if a["status"] == "firing"]


def wait_for(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def firing_events(url: str) -> int:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return int(
                session.scalar(select(func.count()).where(AlertEvent.to_state == "firing")) or 0
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("kind", "rule"),
    [
        pytest.param("xid", "gpu-critical-xid", id="xid79"),
        # Health reads no such event: only the ingest's own wake-up can explain this one.
        pytest.param("thermal_throttle", "gpu-throttle-event", id="event-health-ignores"),
    ],
)
def test_an_event_batch_reaches_the_webhook_long_before_the_timers(
    db_url: str, tmp_path: Path, hook: Receiver, kind: str, rule: str
) -> None:
    settings = alerting(db_url, tmp_path, hook)
    host = f"node-{uuid.uuid4().hex[:6]}"
    token = create_token(db_url, host)
    server = LiveServer(settings, run_jobs=True)
    server.start()
    try:
        assert post_batch(server.url, token, batch(host, gpus=1)).status_code == 200
        time.sleep(1.5)  # the wake-up of the new node's first health state has come and gone
        sent = time.monotonic()
        answer = post_batch(server.url, token, xid_batch(host, kind))
        assert answer.status_code == 200, answer.text

        assert wait_for(lambda: firing_alerts(hook), timeout_s=LONG_S / 4)
        assert hook.requests[0].at - sent < LONG_S / 4
        (alert,) = firing_alerts(hook)
        assert alert["labels"]["alertname"] == rule
        assert alert["labels"]["hostname"] == host
    finally:
        server.stop()
        wipe_notify(db_url)


def test_an_nvlink_down_reaches_the_webhook_through_the_health_refresh(
    db_url: str, tmp_path: Path, hook: Receiver
) -> None:
    settings = alerting(db_url, tmp_path, hook)
    add_rules(db_url, NVLINK_RULE)
    host = f"node-{uuid.uuid4().hex[:6]}"
    token = create_token(db_url, host)
    g = gpu(0, hostname=host)
    payload = batch(host, gpus=[g], samples_per_gpu=1)
    payload["nvlinks"] = nvlinks(g, datetime.now(UTC), links=4)
    payload["nvlinks"][2]["state"] = "down"  # no event, every GPU ok: only health changes
    server = LiveServer(settings, run_jobs=True)
    server.start()
    try:
        assert post_batch(server.url, token, batch(host, gpus=[g])).status_code == 200
        assert post_batch(server.url, token, payload).status_code == 200

        assert wait_for(lambda: firing_alerts(hook), timeout_s=LONG_S / 4)
        (alert,) = firing_alerts(hook)
        assert alert["labels"]["alertname"] == "gpu-nvlink-down"
    finally:
        server.stop()
        wipe_notify(db_url)


def test_two_servers_on_one_postgres_evaluate_and_send_once(
    postgres_url: str, tmp_path: Path, hook: Receiver
) -> None:
    settings = alerting(postgres_url, tmp_path, hook)
    host = f"node-{uuid.uuid4().hex[:6]}"
    token = create_token(postgres_url, host)
    servers = [LiveServer(settings, run_jobs=True), LiveServer(settings, run_jobs=True)]
    with ExitStack() as stack:
        for server in servers:
            server.start()
            stack.callback(server.stop)
        stack.callback(wipe_notify, postgres_url)

        def evaluators() -> list[Any]:
            return [s.app.state.alert_evaluator for s in servers if s.app is not None]

        # Each listener wakes its evaluator once at start: one of them takes the leader lock.
        assert wait_for(lambda: any(e.is_leader for e in evaluators()), timeout_s=10)
        follower = next(s for s, e in zip(servers, evaluators(), strict=True) if not e.is_leader)
        assert post_batch(follower.url, token, batch(host, gpus=1)).status_code == 200
        time.sleep(1.5)  # past the new node's health wake-up: only the follower's NOTIFY is left

        assert (
            post_batch(follower.url, token, xid_batch(host, "thermal_throttle")).status_code == 200
        )

        assert wait_for(lambda: firing_alerts(hook), timeout_s=LONG_S / 4)
        time.sleep(2.0)  # room for a second evaluation or message, if there were one
        assert len(firing_alerts(hook)) == 1
        assert len(hook.requests) == 1
        assert firing_events(postgres_url) == 1
