"""The outbox and the delivery worker against local HTTP receivers started by the tests, on
Postgres and SQLite: 200, 200 with an error body, 400, 404, 429 with Retry-After, 500, a slow
answer past the timeout, connection refused for a while; grouping, per-alert order, silences,
deadlines, and no webhook URL or secret in any log line."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope
from app.notify import service
from app.notify.jobs import signer_for, worker_options
from app.notify.models import NotifyChannel, NotifyDelivery
from app.notify.schemas import ChannelIn, RouteIn
from app.notify.secrets import SecretBox
from app.notify.worker import DeliveryWorker
from tests.conftest import make_settings
from tests.live_server import free_port
from tests.notify_helpers import Alerts, Answer, receiver, wipe_notify

SECRET_PATH = "/hooks/T0SECRET123/B0SECRET456/xyzTOPSECRETxyz"
SIGNING_SECRET = "signing-SECRET-0123456789"


@dataclass
class Env:
    settings: Settings
    factory: sessionmaker[Session]
    box: SecretBox
    alerts: Alerts


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> Iterator[Env]:
    settings = make_settings(
        db_url,
        tmp_path,
        notify_allow_hosts=["127.0.0.1"],
        notify_timeout_s=0.5,
        notify_backoff_base_s=0.05,
        notify_backoff_cap_s=0.3,
    )
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    yield Env(settings, factory, SecretBox.from_settings(settings), Alerts(factory))
    wipe_notify(db_url)
    engine.dispose()


def add_channel(
    env: Env,
    url: str,
    *,
    name: str = "ops",
    kind: str = "webhook",
    team: str | None = None,
    severities: list[str] | None = None,
    group_wait_s: float = 0.0,
    secret: str | None = SIGNING_SECRET,
) -> int:
    with session_scope(env.factory) as session:
        channel = service.create_channel(
            session,
            data=ChannelIn(name=name, kind=kind, url=url, secret=secret),
            box=env.box,
            allow_hosts=["127.0.0.1"],
        )
        service.create_route(
            session,
            data=RouteIn(
                channel_id=channel.id,
                team=team,
                severities=severities or [],
                group_wait_s=group_wait_s,
            ),
        )
        return channel.id


def make_worker(env: Env, **options: object) -> DeliveryWorker:
    opts = replace(worker_options(env.settings), **options)  # type: ignore[arg-type]
    return DeliveryWorker(
        env.factory,
        box=env.box,
        signer=signer_for(env.settings),
        options=opts,
        rng=lambda: 1.0,
    )


def rows(env: Env) -> list[NotifyDelivery]:
    with session_scope(env.factory) as session:
        return list(session.scalars(select(NotifyDelivery).order_by(NotifyDelivery.id)))


def drain(env: Env, worker: DeliveryWorker, *, timeout_s: float = 20.0) -> None:
    """Run worker ticks until no row is queued."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        worker.run_once()
        if all(r.status != "queued" for r in rows(env)):
            return
        time.sleep(0.05)
    raise AssertionError(f"rows still queued: {[(r.id, r.status) for r in rows(env)]}")


def test_it_delivers_a_firing_notice_once_with_a_signed_body_and_an_ack_link(env: Env) -> None:
    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH)
        alert_id = env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
        worker = make_worker(env)
        drain(env, worker)
        worker.run_once()
        worker.close()
    [row] = rows(env)
    assert (row.status, row.kind, row.attempts, row.last_status_code) == (
        "delivered",
        "firing",
        1,
        200,
    )
    assert row.latency_ms is not None and row.delivered_at is not None
    [request] = hook.requests
    assert request.path == SECRET_PATH
    assert request.headers["Idempotency-Key"].startswith("fleetwatch-")
    assert request.headers["X-Fleetwatch-Signature"].startswith("sha256=")
    body = request.json()
    assert body["status"] == "firing"
    assert body["groupKey"] == f'{row.route_id}:{{alertname="gpu-lost",cluster="c1"}}'
    assert [a["labels"]["hostname"] for a in body["alerts"]] == ["n1"]
    extra = body["fleetwatch"]["alerts"][0]
    assert extra["alert_id"] == alert_id
    assert extra["ack_url"].startswith("http://127.0.0.1:8000/notify/ack/")
    assert extra["runbook_url"] == "http://127.0.0.1:8000/runbooks/gpu-lost"


def test_pending_and_silenced_alerts_send_nothing(env: Env) -> None:
    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "pending", from_state="inactive")
        env.alerts.transition("gpu-lost", "n1", "firing", silenced=True)
        env.alerts.transition("gpu-lost", "n1", "resolved")
        worker = make_worker(env)
        worker.run_once()
        worker.close()
    assert rows(env) == []
    assert hook.requests == []


def test_an_alert_silenced_during_the_group_wait_is_suppressed(env: Env) -> None:
    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH, group_wait_s=0.3)
        env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
        env.alerts.transition("gpu-lost", "n1", "firing", from_state="firing", silenced=True)
        time.sleep(0.35)
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    # the second event is a (firing → firing) re-write that is silenced: no row for it
    assert [(r.status, r.last_error) for r in rows(env)] == [
        ("suppressed", "silenced before it was sent")
    ]
    assert hook.requests == []


def test_alerts_of_one_rule_and_cluster_are_grouped_after_the_group_wait(env: Env) -> None:
    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH, group_wait_s=0.5)
        env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
        env.alerts.transition("gpu-lost", "n2", "firing", from_state="pending")
        env.alerts.transition("gpu-lost", "n3", "firing", from_state="pending", cluster="c2")
        worker = make_worker(env)
        assert worker.run_once().claimed == 0  # still waiting
        time.sleep(0.55)
        drain(env, worker)
        worker.close()
    groups = sorted(
        (b["groupLabels"]["cluster"], [a["labels"]["hostname"] for a in b["alerts"]])
        for b in hook.bodies()
    )
    assert groups == [("c1", ["n1", "n2"]), ("c2", ["n3"])]


def test_resolved_is_sent_at_once_after_its_firing_notice(env: Env) -> None:
    with receiver() as hook:
        # A group wait long enough that a loaded CI machine still runs the first worker pass
        # inside it (0.4 s was not: the two transitions alone took 0.7 s once).
        add_channel(env, hook.url + SECRET_PATH, group_wait_s=2.0)
        env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
        env.alerts.transition("gpu-lost", "n1", "resolved")
        firing, resolved = rows(env)
        assert resolved.not_before <= datetime.now(UTC)  # resolved is not held
        assert firing.not_before > resolved.not_before  # the firing notice is
        worker = make_worker(env)
        assert worker.run_once().claimed == 0  # the firing row waits; resolved waits for it
        time.sleep(2.05)
        drain(env, worker)
        worker.close()
    assert [b["status"] for b in hook.bodies()] == ["firing", "resolved"]


def test_routes_pick_channels_by_team_and_severity(env: Env) -> None:
    with receiver() as a, receiver() as b:
        add_channel(env, a.url + "/a", name="a", team="vision", severities=["critical"])
        add_channel(env, b.url + "/b", name="b", team="inference")
        env.alerts.transition("r1", "n1", "firing", from_state="pending", team="vision")
        env.alerts.transition("r2", "n2", "firing", team="vision", severity="warning")
        env.alerts.transition("r3", "n3", "firing", team="inference", severity="warning")
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    assert [x["labels"]["hostname"] for body in a.bodies() for x in body["alerts"]] == ["n1"]
    assert [x["labels"]["hostname"] for body in b.bodies() for x in body["alerts"]] == ["n3"]


def test_400_fails_at_once_with_the_answer_in_the_log(env: Env) -> None:
    with receiver([Answer(400, b"invalid_payload")]) as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert (row.status, row.attempts, row.last_status_code, row.last_error) == (
        "failed",
        1,
        400,
        "Webhook: HTTP 400: invalid_payload",
    )
    assert len(hook.requests) == 1


def test_404_marks_the_channel_broken_and_fails_its_other_rows(env: Env) -> None:
    with receiver([Answer(404, b"no_such_hook")]) as hook:
        channel_id = add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        worker.run_once()
        with session_scope(env.factory) as session:
            session.add(
                NotifyDelivery(**{**_copy(rows(env)[0]), "status": "queued", "attempts": 0})
            )
        worker.run_once()
        worker.close()
    with session_scope(env.factory) as session:
        channel = session.get(NotifyChannel, channel_id)
        assert channel is not None
        assert (channel.broken, channel.last_error) == (True, "Webhook: HTTP 404: no_such_hook")
    assert [(r.status, r.last_error) for r in rows(env)] == [
        ("failed", "Webhook: HTTP 404: no_such_hook"),
        ("failed", "channel broken: Webhook: HTTP 404: no_such_hook"),
    ]
    assert len(hook.requests) == 1


def _copy(row: NotifyDelivery) -> dict[str, object]:
    keys = ("channel_id", "route_id", "group_key", "kind", "payload", "not_before")
    return {k: getattr(row, k) for k in keys} | {
        "deadline_at": row.deadline_at,
        "created_at": row.created_at,
    }


def test_429_waits_for_retry_after_then_delivers(env: Env) -> None:
    script = [Answer(429, b"slow down", {"Retry-After": "1"}), Answer(200)]
    with receiver(script) as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        worker.run_once()
        [row] = rows(env)
        assert (row.status, row.attempts, row.last_status_code) == ("queued", 1, 429)
        assert row.last_error == "Webhook: HTTP 429: slow down"
        assert (row.not_before - row.created_at).total_seconds() >= 1.0
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert (row.status, row.attempts, row.last_error) == ("delivered", 2, None)
    first, second = hook.requests
    assert second.at - first.at >= 1.0
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]


def test_500_is_retried_and_the_alert_delivered_once(env: Env) -> None:
    with receiver([Answer(500, b"oops"), Answer(503), Answer(200)]) as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 3, 200)
    assert [r.json()["status"] for r in hook.requests] == ["firing"] * 3


def test_200_with_an_error_body_is_retried_for_teams(env: Env) -> None:
    error = b"Webhook message delivery failed with error: Microsoft Teams endpoint returned "
    script = [Answer(200, error + b"HTTP error 429 with ContextId abc"), Answer(200, b"1")]
    with receiver(script) as hook:
        add_channel(env, hook.url + SECRET_PATH, kind="teams", secret=None)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        worker.run_once()
        assert rows(env)[0].status == "queued"
        assert "HTTP error 429" in (rows(env)[0].last_error or "")
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert (row.status, row.attempts) == ("delivered", 2)
    assert len(hook.requests) == 2


def test_a_slow_answer_times_out_and_the_retry_carries_the_same_idempotency_key(
    env: Env,
) -> None:
    with receiver([Answer(200, delay_s=1.5), Answer(200)]) as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        worker.run_once()
        [row] = rows(env)
        assert (row.status, row.last_error, row.last_status_code) == (
            "queued",
            "timed out (ReadTimeout)",
            None,
        )
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert (row.status, row.attempts) == ("delivered", 2)
    keys = [r.headers["Idempotency-Key"] for r in hook.requests]
    assert len(keys) == 2 and len(set(keys)) == 1  # a receiver deduplicating by key sees one


def test_retries_stop_at_the_deadline(env: Env) -> None:
    with receiver([Answer(500, b"down")]) as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env, deadline_s=1.5)
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert row.status == "failed"
    assert row.last_error == (
        f"gave up at the deadline after {row.attempts} attempts: Webhook: HTTP 500: down"
    )
    assert row.attempts == len(hook.requests) >= 2


def test_connection_refused_for_10_s_then_each_notice_arrives_once_in_order(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()
    url = f"http://127.0.0.1:{port}{SECRET_PATH}"
    add_channel(env, url)
    env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
    env.alerts.transition("gpu-lost", "n1", "resolved")
    env.alerts.transition("gpu-lost", "n1", "firing", from_state="pending")
    env.alerts.transition("gpu-lost", "n2", "firing", from_state="pending")
    worker = make_worker(env, backoff_cap_s=1.0)
    refused_until = time.monotonic() + 10
    while time.monotonic() < refused_until:
        worker.run_once()
        time.sleep(0.1)
    queued = rows(env)
    assert {r.status for r in queued} == {"queued"}
    assert all(r.last_error and r.last_error.startswith("connection error") for r in queued[:1])
    with receiver(port=port) as hook:
        drain(env, worker)
        worker.close()
    assert {r.status for r in rows(env)} == {"delivered"}
    sent = [
        (a["labels"]["hostname"], a["status"]) for body in hook.bodies() for a in body["alerts"]
    ]
    assert sorted(sent) == sorted(
        [("n1", "firing"), ("n1", "resolved"), ("n1", "firing"), ("n2", "firing")]
    )
    assert [s for h, s in sent if h == "n1"] == ["firing", "resolved", "firing"]
    assert len(hook.requests) == len({r.headers["Idempotency-Key"] for r in hook.requests})
    _assert_no_secrets(caplog, rows(env))


def test_no_webhook_url_or_secret_in_any_log_line_or_error(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    script = [Answer(500, SECRET_PATH.encode()), Answer(404, b"gone " + SECRET_PATH.encode())]
    with receiver(script) as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert row.last_error == "Webhook: HTTP 404: gone …"
    assert any("notification to channel" in r.getMessage() for r in caplog.records)
    _assert_no_secrets(caplog, rows(env))


def _assert_no_secrets(caplog: pytest.LogCaptureFixture, stored: list[NotifyDelivery]) -> None:
    texts = [r.getMessage() for r in caplog.records] + [r.last_error or "" for r in stored]
    for secret in (SECRET_PATH, "T0SECRET123", "xyzTOPSECRETxyz", SIGNING_SECRET):
        assert not [t for t in texts if secret in t], secret


def test_repeats_go_to_firing_alerts_that_are_not_acknowledged(env: Env) -> None:
    from datetime import timedelta

    from app.db import utcnow
    from app.notify.outbox import enqueue_repeats

    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        env.alerts.transition("gpu-lost", "n2", "firing", acked=True)
        worker = make_worker(env)
        drain(env, worker)
        later = utcnow() + timedelta(seconds=4 * 3600 + 1)  # the default interval
        with session_scope(env.factory) as session:
            assert enqueue_repeats(session, now=utcnow()) == 0  # not yet due
            assert enqueue_repeats(session, now=later) == 1
            assert enqueue_repeats(session, now=later) == 0  # one is queued already
        drain(env, worker)
        worker.close()
    assert [(r.kind, r.payload["labels"]["hostname"]) for r in rows(env)][-1] == ("repeat", "n1")
    assert len(hook.requests) == 2  # one group of n1+n2, then the repeat of n1


def test_workers_on_postgres_never_claim_the_same_rows(env: Env, db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SKIP LOCKED is Postgres; SQLite runs one worker")
    from app.db import utcnow
    from app.notify.worker import TickReport

    add_channel(env, "http://127.0.0.1:9/x")
    for host in ("n1", "n2", "n3"):
        env.alerts.transition("gpu-lost", host, "firing", cluster=host)
    worker = make_worker(env)
    first, second = env.factory(), env.factory()
    try:
        a = worker.claim(first, now=utcnow(), report=TickReport())
        b = worker.claim(second, now=utcnow(), report=TickReport())
    finally:
        first.rollback(), second.rollback()
        first.close(), second.close()
        worker.close()
    assert sorted(i for batch in a for i in batch.row_ids) == [r.id for r in rows(env)]
    assert b == []


def test_an_undecryptable_url_marks_the_channel_broken_with_a_clear_error(env: Env) -> None:
    channel_id = add_channel(env, "http://127.0.0.1:9" + SECRET_PATH)
    with session_scope(env.factory) as session:
        channel = session.get(NotifyChannel, channel_id)
        assert channel is not None
        channel.url_encrypted = SecretBox("another key").encrypt("http://127.0.0.1:9/x")
    env.alerts.transition("gpu-lost", "n1", "firing")
    worker = make_worker(env)
    worker.run_once()
    worker.close()
    with session_scope(env.factory) as session:
        channel = session.get(NotifyChannel, channel_id)
        assert channel is not None and channel.broken
        assert (channel.last_error or "").startswith(
            "the stored webhook URL cannot be decrypted with this server's secret key"
        )
    assert [r.status for r in rows(env)] == ["failed"]


def test_the_guard_is_checked_again_at_send_time(env: Env) -> None:
    with receiver() as hook:
        add_channel(env, hook.url + SECRET_PATH)
        env.alerts.transition("gpu-lost", "n1", "firing")
        worker = make_worker(env, allow_hosts=())  # the allow-list changed since
        worker.run_once()
        worker.close()
    [row] = rows(env)
    assert (row.status, row.last_error) == (
        "failed",
        "host 127.0.0.1 resolves to 127.0.0.1, a loopback address "
        "(allow it with the notify_allow_hosts setting)",
    )
    assert hook.requests == []
