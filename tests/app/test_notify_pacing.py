"""Pacing per destination, retry-after from a body, Alertmanager re-posts inside its
resolve timeout, and the last attempt inside the delivery deadline (Postgres and SQLite)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from app.config import SettingsError, load_settings
from app.db import session_scope, utcnow
from app.errors import BadRequest
from app.notify import service
from app.notify.channels import common
from app.notify.channels.base import retry_after_s
from app.notify.channels.registry import get_kind
from app.notify.outbox import enqueue_repeats
from app.notify.pacing import Pace, Pacer, pace_for, parse_pace
from app.notify.schemas import ChannelIn, RouteIn
from tests.app import test_notify_delivery as delivery
from tests.app.test_notify_delivery import Env, drain, make_worker, rows
from tests.notify_helpers import Answer, receiver

env = delivery.env  # the delivery tests' fixture


def test_paces_are_read_from_option_setting_and_kind() -> None:
    assert parse_pace("5/2s") == Pace(5, 2.0) and parse_pace("1/s") == Pace(1, 1.0)
    assert parse_pace("off") is None and parse_pace("") is None
    with pytest.raises(ValueError, match="not a pace"):
        parse_pace("fast")
    assert parse_pace("100000/86400s") == Pace(100_000, 86_400.0)
    # Periods past a day overflowed the schedule's datetime: every send to it failed, silently.
    for huge in ("1/1000000000000", "1/100000000000000000000", "1/86401s", "100001/1s"):
        with pytest.raises(ValueError, match="not a pace"):
            parse_pace(huge)
    discord, webhook = get_kind("discord"), get_kind("webhook")
    assert pace_for(discord, {}, {}) == Pace(5, 2.0)
    assert pace_for(get_kind("slack"), {}, {}) == Pace(1, 1.0)
    assert pace_for(discord, {}, {"discord": "1/3s"}) == Pace(1, 3.0)
    assert pace_for(discord, {"rate_limit": "off"}, {"discord": "1/3s"}) is None
    assert pace_for(webhook, {}, {}) is None


def test_a_429_body_retry_after_counts_and_retry_after_may_be_a_float() -> None:
    body = b'{"ok":false,"error":"rate_limited","retry_after":1.5}'
    assert common.safe_interpret("Slack", 429, {}, body).retry_after_s == 1.5
    assert common.safe_interpret("Slack", 429, {"Retry-After": "3"}, body).retry_after_s == 3
    assert retry_after_s({"retry-after": "0.25"}) == 0.25
    assert retry_after_s({"Retry-After": "soon"}) is None


def test_two_pacers_share_one_schedule_and_one_hold(env: Env) -> None:
    first, second = Pacer(env.factory), Pacer(env.factory)  # as two processes would
    pace = Pace(5, 2.0)
    assert first.reserve("k", pace, max_wait_s=5).wait_s == 0
    # The first's slot is 0.44 s wide (0.4 s and the 10 % margin); less the time since then.
    assert 0.1 < second.reserve("k", pace, max_wait_s=5).wait_s <= pace.interval_s
    assert first.reserve("other", pace, max_wait_s=5).wait_s == 0  # per destination
    until = second.hold("k", seconds=30)
    assert first.held_until("k") == until
    assert first.reserve("k", pace, max_wait_s=5).held_until == until
    assert first.reserve("k", None, max_wait_s=5).held_until == until  # holds bind all


@pytest.mark.parametrize("rate_limit", ["x", "1/1000000000000", "1/100000000000000000000"])
def test_a_bad_rate_limit_option_is_refused(env: Env, rate_limit: str) -> None:
    with session_scope(env.factory) as session, pytest.raises(BadRequest, match="rate_limit"):
        service.create_channel(
            session,
            data=ChannelIn(
                name="d",
                kind="discord",
                url="http://127.0.0.1:9/x",
                options={"rate_limit": rate_limit},
            ),
            box=env.box,
            allow_hosts=["127.0.0.1"],
        )


def test_alertmanager_gets_firing_alerts_reposted_inside_its_resolve_timeout(env: Env) -> None:
    with receiver() as hook:
        with session_scope(env.factory) as session:
            channel = service.create_channel(
                session,
                data=ChannelIn(
                    name="am",
                    kind="alertmanager",
                    url=hook.url,
                    options={"resolve_timeout_s": "120"},
                ),
                box=env.box,
                allow_hosts=["127.0.0.1"],
            )
            # The default 4 h repeat interval, which alone would let Alertmanager resolve it.
            service.create_route(session, data=RouteIn(channel_id=channel.id, group_wait_s=0))
        env.alerts.transition("gpu-lost", "n1", "firing", acked=True)
        worker = make_worker(env)
        drain(env, worker)
        with session_scope(env.factory) as session:
            assert enqueue_repeats(session, now=utcnow() + timedelta(seconds=35)) == 0
            assert enqueue_repeats(session, now=utcnow() + timedelta(seconds=41)) == 1
        drain(env, worker)
        worker.close()
    assert [r.kind for r in rows(env)] == ["firing", "repeat"]
    assert [r.status for r in rows(env)] == ["delivered", "delivered"]
    assert [len(b) for b in hook.bodies()] == [1, 1]
    assert all("endsAt" not in b[0] for b in hook.bodies())


def test_alertmanager_is_posted_the_alerts_firing_before_its_route(env: Env) -> None:
    """An Alertmanager knows only what it is posted: alerts already firing when its channel and
    route are made are posted at the next repeat scan (a chat channel is not told of them)."""
    env.alerts.transition("gpu-lost", "n1", "firing")
    env.alerts.transition("gpu-lost", "n2", "firing")
    with receiver() as hook:
        with session_scope(env.factory) as session:
            channel = service.create_channel(
                session,
                data=ChannelIn(name="am", kind="alertmanager", url=hook.url),
                box=env.box,
                allow_hosts=["127.0.0.1"],
            )
            service.create_route(session, data=RouteIn(channel_id=channel.id, group_wait_s=0))
        with session_scope(env.factory) as session:
            assert enqueue_repeats(session) == 2
        with session_scope(env.factory) as session:
            assert enqueue_repeats(session) == 0  # queued already, then told
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
        with session_scope(env.factory) as session:
            assert enqueue_repeats(session) == 0
    assert sorted(r.status for r in rows(env)) == ["delivered", "delivered"]
    posted = sorted(a["labels"]["hostname"] for body in hook.bodies() for a in body)
    assert posted == ["n1", "n2"]


def test_alertmanager_refuses_a_resolve_timeout_it_cannot_keep(env: Env) -> None:
    with session_scope(env.factory) as session, pytest.raises(BadRequest, match="resolve_timeout"):
        service.create_channel(
            session,
            data=ChannelIn(
                name="am",
                kind="alertmanager",
                url="http://127.0.0.1:9",
                options={"resolve_timeout_s": "45"},  # under 60: posts 15 s apart
            ),
            box=env.box,
            allow_hosts=["127.0.0.1"],
        )


def test_the_last_attempt_happens_inside_the_deadline(env: Env) -> None:
    with receiver([Answer(500, b"down")]) as hook:
        delivery.add_channel(env, hook.url + "/hook")
        env.alerts.transition("gpu-lost", "n1", "firing")
        # Backoff 4 s then 8 s: the second retry would come after the 6-s deadline, so the last
        # try is at 5 s. (At 2 s / 3 s with a 0.5-s margin a full run on a loaded 2-CPU machine
        # sent the first retry late enough to leave no room for the last; at 1 s / 1.5 s the
        # 0.25-s margins failed once.)
        worker = make_worker(
            env, deadline_s=6.0, backoff_base_s=4.0, backoff_cap_s=20.0, last_try_margin_s=1.0
        )
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert row.status == "failed" and row.attempts == 3 == len(hook.requests)
    assert row.last_error == "gave up at the deadline after 3 attempts: Webhook: HTTP 500: down"
    last_at = hook.requests[-1].at - hook.requests[0].at
    assert 4.0 < last_at < 6.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"webhook": "1/1000000000000"}', "webhook: '1/1000000000000' is not a pace"),
        ('{"slak": "1/1s"}', "'slak' is not a channel kind"),
    ],
)
def test_a_bad_rate_limits_setting_stops_start_up_naming_it(value: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(notify_rate_limits=json.loads(value))
    assert "FLEETWATCH_NOTIFY_RATE_LIMITS" in str(caught.value) and message in str(caught.value)
