"""Exactly once per message part, against local receivers that behave like Slack (429 with
``retry_after`` in the body), Discord (5 requests per 2 s), PagerDuty failing with 5xx, and a
receiver too slow to answer: each alert arrives once per channel, a retry resends only the
parts not accepted, and alerts are never regrouped. On Postgres and SQLite."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import update

from app.db import session_scope, utcnow
from app.notify import service
from app.notify.models import NotifyDelivery
from app.notify.schemas import ChannelIn, RouteIn
from tests.app import test_notify_delivery as delivery
from tests.app.test_notify_delivery import Env, drain, make_worker, rows
from tests.notify_helpers import Answer, RateLimit, Receiver, receiver

HOST = re.compile(r"on (n\d+)")
env = delivery.env  # the delivery tests' fixture: settings, sessions, alert writer
SLACK_429 = Answer(429, b'{"ok":false,"error":"rate_limited","retry_after":0.3}')


def add_channel(env: Env, url: str, *, kind: str, secret: str | None = None, **options: str) -> int:
    with session_scope(env.factory) as session:
        channel = service.create_channel(
            session,
            data=ChannelIn(name=kind, kind=kind, url=url, secret=secret, options=options),
            box=env.box,
            allow_hosts=["127.0.0.1"],
        )
        service.create_route(session, data=RouteIn(channel_id=channel.id, group_wait_s=30))
        return channel.id


def release(env: Env) -> None:
    """End the group wait of every queued row now (the alerts were queued as one group)."""
    with session_scope(env.factory) as session:
        session.execute(
            update(NotifyDelivery)
            .where(NotifyDelivery.status == "queued")
            .values(not_before=utcnow())
        )


def slack_hosts(body: dict[str, Any]) -> list[str]:
    return [
        m.group(1)
        for b in body["blocks"]
        if b["type"] == "header" and (m := HOST.search(b["text"]["text"]))
    ]


def discord_hosts(body: dict[str, Any]) -> list[str]:
    return [m.group(1) for e in body["embeds"] if (m := HOST.search(e["title"]))]


def pagerduty_hosts(body: dict[str, Any]) -> list[str]:
    return [body["payload"]["source"]]


def arrivals(
    hook: Receiver, hosts_of: Callable[[dict[str, Any]], list[str]], *, by_key: bool
) -> Counter[str]:
    """How often each alert reached the receiver in an accepted (2xx) request; ``by_key``:
    a request repeating an ``Idempotency-Key`` already accepted counts once (as a receiver
    that drops duplicates by key sees it)."""
    seen: set[str] = set()
    counts: Counter[str] = Counter()
    for request in hook.requests:
        key = request.headers["Idempotency-Key"]
        if request.status >= 300 or (by_key and key in seen):
            continue
        seen.add(key)
        counts.update(hosts_of(request.json()))
    return counts


def duplicates(counts: Counter[str]) -> int:
    return sum(n - 1 for n in counts.values() if n > 1)


def test_slack_429_with_retry_after_in_the_body_resends_only_the_refused_part(env: Env) -> None:
    hosts = [f"n{i}" for i in range(40)]
    with receiver([Answer(200, b"ok"), SLACK_429, Answer(200, b"ok")]) as hook:
        add_channel(env, hook.url + "/services/T/B/x", kind="slack", rate_limit="20/1s")
        env.alerts.fire_many("gpu-lost", hosts)
        release(env)
        worker = make_worker(env)
        worker.run_once()
        assert [r.status for r in hook.requests] == [200, 429]
        env.alerts.fire_many("gpu-lost", ["n40"])  # same group, while the message waits
        release(env)
        drain(env, worker)
        worker.close()
    counts = arrivals(hook, slack_hosts, by_key=False)
    assert sorted(counts) == sorted([*hosts, "n40"]) and duplicates(counts) == 0
    refused = hook.requests[1]
    # After the hold, n40's own message may go out before the retry (both are due then): find
    # the retry by its idempotency key, not by its position.
    (retried,) = [
        r
        for r in hook.requests[2:]
        if r.headers["Idempotency-Key"] == refused.headers["Idempotency-Key"]
    ]
    # The same part, the same alerts; only the ack links are signed again (with the time).
    assert unsigned(refused.body.decode()) == unsigned(retried.body.decode())
    # The 429 held back every message to the destination, n40's too.
    assert all(r.at - refused.at >= 0.3 for r in hook.requests[2:])
    assert ["n40"] in [slack_hosts(r.json()) for r in hook.requests]  # a message of its own
    stored = [r for r in rows(env) if r.payload["labels"]["hostname"] != "n40"]
    assert {r.status for r in rows(env)} == {"delivered"}
    assert Counter((r.part, r.parts, r.attempts) for r in stored) == {
        (1, 3, 1): 16,
        (2, 3, 2): 16,
        (3, 3, 1): 8,
    }


def test_discord_like_receiver_gets_a_10_part_message_paced_without_a_429(env: Env) -> None:
    hosts = [f"n{i}" for i in range(100)]
    limit = RateLimit(5, 2.0)
    with receiver(respond=limit) as hook:
        add_channel(env, hook.url + "/api/webhooks/1/tok", kind="discord")  # 5 per 2 s
        env.alerts.fire_many("gpu-lost", hosts)
        release(env)
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    counts = arrivals(hook, discord_hosts, by_key=False)
    assert sorted(counts) == sorted(hosts) and duplicates(counts) == 0
    assert (len(hook.requests), limit.too_many) == (10, 0)


def test_discord_like_429s_hold_the_destination_and_each_part_arrives_once(env: Env) -> None:
    hosts = [f"n{i}" for i in range(100)]
    limit = RateLimit(5, 2.0)
    with receiver(respond=limit) as hook:
        add_channel(env, hook.url + "/api/webhooks/1/tok", kind="discord", rate_limit="20/1s")
        env.alerts.fire_many("gpu-lost", hosts)
        release(env)
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    counts = arrivals(hook, discord_hosts, by_key=False)
    assert sorted(counts) == sorted(hosts) and duplicates(counts) == 0
    assert limit.too_many >= 1 and limit.ignored_holds == 0
    accepted = [r.headers["Idempotency-Key"] for r in hook.requests if r.status < 300]
    assert len(accepted) == len(set(accepted)) == 10


def test_eight_groups_to_one_webhook_never_ignore_another_groups_429(env: Env) -> None:
    limit = RateLimit(5, 2.0)
    with receiver(respond=limit) as hook:
        add_channel(env, hook.url + "/api/webhooks/1/tok", kind="discord", rate_limit="4/1s")
        for cluster in range(8):
            hosts = [f"n{cluster}{i}" for i in range(3)]
            env.alerts.fire_many(f"rule-{cluster}", hosts, cluster=f"c{cluster}")
        release(env)
        worker = make_worker(env)
        assert worker.run_once().messages == 8  # sent in parallel, 8 threads
        drain(env, worker)
        worker.close()
    counts = arrivals(hook, discord_hosts, by_key=False)
    assert len(counts) == 24 and duplicates(counts) == 0
    assert limit.too_many >= 1 and limit.ignored_holds == 0


def test_a_5xx_on_a_middle_event_resends_that_event_alone(env: Env) -> None:
    hosts = [f"n{i}" for i in range(5)]
    script = [Answer(202), Answer(202), Answer(500, b"oops"), Answer(202)]
    with receiver(script) as hook:
        add_channel(
            env, hook.url + "/v2/enqueue", kind="pagerduty", secret="a" * 32, rate_limit="50/1s"
        )
        env.alerts.fire_many("gpu-lost", hosts)
        release(env)
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    counts = arrivals(hook, pagerduty_hosts, by_key=False)
    assert sorted(counts) == hosts and duplicates(counts) == 0
    assert [r.status for r in hook.requests] == [202, 202, 500, 202, 202, 202]
    assert [pagerduty_hosts(r.json())[0] for r in hook.requests] == [
        "n0", "n1", "n2", "n2", "n3", "n4",
    ]  # fmt: skip


def test_a_timed_out_part_is_resent_alone_with_the_same_key(env: Env) -> None:
    hosts = [f"n{i}" for i in range(40)]
    script = [Answer(200, b"ok"), Answer(200, b"ok", delay_s=1.0), Answer(200, b"ok")]
    with receiver(script) as hook:
        add_channel(env, hook.url + "/services/T/B/x", kind="slack", rate_limit="20/1s")
        env.alerts.fire_many("gpu-lost", hosts)
        release(env)
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    assert len(hook.requests) == 4
    timed_out, resent = hook.requests[1:3]
    assert slack_hosts(timed_out.json()) == slack_hosts(resent.json())
    assert timed_out.headers["Idempotency-Key"] == resent.headers["Idempotency-Key"]
    by_key = arrivals(hook, slack_hosts, by_key=True)
    assert sorted(by_key) == sorted(hosts) and duplicates(by_key) == 0
    # The slow receiver did read the timed-out part: only its key tells the copies apart.
    assert duplicates(arrivals(hook, slack_hosts, by_key=False)) == 16


def test_truncation_is_logged_and_kept_on_the_delivery_row(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with receiver([Answer(200, b"ok")]) as hook:
        add_channel(env, hook.url + "/services/T/B/x", kind="slack", rate_limit="off")
        env.alerts.fire_many("gpu-lost", ["n1"], summary=" " + "x" * 200)
        release(env)
        worker = make_worker(env)
        drain(env, worker)
        worker.close()
    [row] = rows(env)
    assert row.status == "delivered"
    assert (row.truncated or "").startswith("truncated to fit: text of 227 characters cut to 150")
    assert any("truncated to fit" in r.getMessage() for r in caplog.records)
    out = service.delivery_out(row)
    assert (out.part, out.parts, out.truncated) == (1, 1, row.truncated)


def unsigned(body: str) -> str:
    """``body`` with each signed acknowledgement token (``/notify/ack/<token>``) blanked: the
    signature carries the time it was made."""
    return re.sub(r"/notify/ack/[A-Za-z0-9._-]+", "/notify/ack/…", body)
