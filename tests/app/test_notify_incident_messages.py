"""One chat message per incident, updated in place, against local fakes of Slack's Web API and
a Discord webhook that answer like the real services (tests/chat_apis.py), on Postgres and
SQLite: the first page posts, every later change (another alert of the incident, a resolve, a
new Xid, the close) edits that message (Slack: plus a thread reply), an edit that cannot be
made is posted anew, never lost; alerts of no incident go out as before."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope, utcnow
from app.fleet.models import Node
from app.incidents.models import Incident
from app.notify import service
from app.notify.incident_rows import enqueue_changes
from app.notify.models import NotifyDelivery, NotifyIncidentMessage
from app.notify.schemas import ChannelIn, ChannelUpdate, RouteIn
from app.notify.secrets import SecretBox
from app.notify.worker import DeliveryWorker
from tests.app.test_notify_delivery import make_worker
from tests.chat_apis import DiscordApi, SlackApi
from tests.conftest import make_settings
from tests.notify_helpers import Alerts, Answer, Received, receiver, wipe_notify

TOKEN = "xoxb-1234-5678-TOPSECRETtoken"
CHANNEL = "C0123ABCD"
WEBHOOK = "/api/webhooks/1000000000000000002/SECRETwebhookTOKEN"


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
        notify_timeout_s=2.0,
        notify_backoff_base_s=0.05,
        notify_backoff_cap_s=0.3,
        external_url="https://fleet.example",
    )
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    yield Env(settings, factory, SecretBox.from_settings(settings), Alerts(factory))
    wipe_notify(db_url)
    engine.dispose()


def add_channel(env: Env, kind: str, url: str, **fields: Any) -> int:
    with session_scope(env.factory) as session:
        channel = service.create_channel(
            session,
            data=ChannelIn(name=kind, kind=kind, url=url, **fields),
            box=env.box,
            allow_hosts=["127.0.0.1"],
        )
        service.create_route(session, data=RouteIn(channel_id=channel.id, group_wait_s=0.0))
        return channel.id


def open_incident(env: Env, hostname: str = "node-a", *, xids: list[int] | None = None) -> int:
    """A node and an open incident on it (first fault 30 s ago, the last 10 s ago)."""
    now = utcnow()
    with session_scope(env.factory) as session:
        node = Node(hostname=hostname, labels={}, created_at=now)
        session.add(node)
        session.flush()
        incident = Incident(
            node_id=node.id,
            opened_at=now - timedelta(seconds=30),
            last_event_at=now - timedelta(seconds=10),
            event_count=2,
            gpu_indexes=[1],
            xids=xids or [79],
            kinds=["gpu_fallen_off_bus", "xid"],
            state="unhealthy",
            job_fatal=True,
            action_code="reboot_node",
            action_text="fallen off the bus: drain the node and power-cycle it",
            updated_at=now,
            test=False,
        )
        session.add(incident)
        session.flush()
        return incident.id


def change_incident(env: Env, incident_id: int, **values: Any) -> None:
    with session_scope(env.factory) as session:
        incident = session.get_one(Incident, incident_id)
        for key, value in values.items():
            setattr(incident, key, value)


def drain(env: Env, worker: DeliveryWorker) -> None:
    """Worker ticks until nothing is queued (changes and closes queued first)."""
    for _ in range(100):
        with session_scope(env.factory) as session:
            enqueue_changes(
                session,
                now=utcnow(),
                quiet_s=env.settings.incident_quiet_s,
                deadline_s=env.settings.notify_deadline_s,
            )
        worker.run_once()
        with session_scope(env.factory) as session:
            waiting = session.scalar(
                select(NotifyDelivery.id).where(NotifyDelivery.status == "queued").limit(1)
            )
        if waiting is None:
            return
    raise AssertionError("rows still queued")


def deliveries(env: Env) -> list[tuple[str, str, int | None]]:
    with session_scope(env.factory) as session:
        return [
            (r.kind, r.status, r.incident_id)
            for r in session.scalars(select(NotifyDelivery).order_by(NotifyDelivery.id))
        ]


def message_of(env: Env, incident_id: int) -> NotifyIncidentMessage:
    with session_scope(env.factory) as session:
        found = session.scalar(
            select(NotifyIncidentMessage).where(NotifyIncidentMessage.incident_id == incident_id)
        )
        assert found is not None
        session.expunge(found)
        return found


def gpu(index: int) -> dict[str, str]:
    return {"gpu_uuid": f"GPU-{index}", "gpu_index": str(index), "gpu": str(index)}


def test_slack_posts_one_message_per_incident_and_edits_it_with_a_thread_of_changes(
    env: Env,
) -> None:
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(
            env,
            "slack_app",
            api.url + "/api",
            secret=TOKEN,
            options={"channel": CHANNEL},
        )
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        [post] = api.requests
        assert (post.method, post.path) == ("POST", "/api/chat.postMessage")
        assert post.headers["Authorization"] == f"Bearer {TOKEN}"
        body = post.json()
        assert body["channel"] == CHANNEL and "thread_ts" not in body
        assert body["text"] == (
            f"🔴 Incident {incident_id} on node-a: Unhealthy, job-fatal · 1 alert firing · open"
        )
        header, facts, alerts, buttons, _context = body["blocks"]
        assert header["text"]["text"] == body["text"]
        assert "*GPUs:* 1\n*Xids:* 79\n" in facts["text"]["text"]
        assert "*Suggested action:* fallen off the bus" in facts["text"]["text"]
        assert "gpu-lost on node-a" in alerts["text"]["text"]
        assert buttons["elements"][0]["url"] == f"https://fleet.example/incidents/{incident_id}"
        [ts] = slack.messages
        assert message_of(env, incident_id).ref == {"channel": CHANNEL, "ts": ts}

        # A second alert of the incident (another GPU's Xid): the same message, edited.
        env.alerts.transition(
            "gpu-critical-xid", "node-a", "firing", from_state="pending", extra=gpu(3)
        )
        drain(env, worker)
        update, reply = api.requests[1:]
        assert (update.path, update.json()["ts"], update.json()["channel"]) == (
            "/api/chat.update",
            ts,
            CHANNEL,
        )
        assert "2 alerts firing" in update.json()["text"]
        assert (reply.path, reply.json()["thread_ts"]) == ("/api/chat.postMessage", ts)
        assert slack.replies[ts] == ["Critical firing: gpu-critical-xid on node-a"]

        # The incident grows (a new GPU and Xid, no new alert), then one alert resolves.
        change_incident(env, incident_id, gpu_indexes=[1, 3], xids=[79, 154])
        drain(env, worker)
        assert "*GPUs:* 1, 3\n*Xids:* 79, 154" in slack.messages[ts]["blocks"][1]["text"]["text"]
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        assert "1 alert firing" in slack.messages[ts]["text"]

        # The incident closes (its quiet period passed): the message says so.
        long_ago = utcnow() - timedelta(hours=1)
        change_incident(env, incident_id, opened_at=long_ago, last_event_at=long_ago)
        drain(env, worker)
        worker.close()
    assert "· closed" in slack.messages[ts]["text"]
    assert len(slack.messages) == 1  # one message for the whole incident
    assert slack.replies[ts][1:] == [
        f"Incident {incident_id} now: unhealthy, GPUs 1, 3, Xids 79, 154",
        "✅ Resolved: gpu-lost on node-a",
        f"✅ Incident {incident_id} closed: no new fault since "
        + slack.replies[ts][3].rsplit(" ", 1)[1],
    ]
    assert [(k, s) for k, s, _ in deliveries(env)] == [
        ("firing", "delivered"),
        ("firing", "delivered"),
        ("incident", "delivered"),
        ("resolved", "delivered"),
        ("incident", "delivered"),
    ]
    assert {i for _, _, i in deliveries(env)} == {incident_id}
    stored = message_of(env, incident_id)
    assert stored.updates == 4 and stored.closed_told_at is not None
    with session_scope(env.factory) as session:
        log = [
            service.delivery_out(r)
            for r in service.list_deliveries(session, channel_id=stored.channel_id)
        ]
    closed = log[0]  # newest first: the close, told with its incident
    assert (closed.kind, closed.alert_id, closed.incident_id) == ("incident", None, incident_id)


def test_a_slack_message_that_cannot_be_edited_is_posted_anew(env: Env) -> None:
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        [first] = slack.messages
        slack.delete(first)  # someone deleted it in Slack
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        worker.close()
    paths = [r.path for r in api.requests]
    assert paths == ["/api/chat.postMessage", "/api/chat.update", "/api/chat.postMessage"]
    assert api.requests[1].json()["ts"] == first
    [second] = slack.messages
    assert second != first and "all alerts resolved" in slack.messages[second]["text"]
    assert message_of(env, incident_id).ref == {"channel": CHANNEL, "ts": second}
    assert [s for _, s, _ in deliveries(env)] == ["delivered", "delivered"]


def test_discord_posts_with_wait_and_patches_the_message_then_reposts_a_deleted_one(
    env: Env,
) -> None:
    discord = DiscordApi(WEBHOOK)
    with receiver(serve=discord) as api:
        add_channel(env, "discord", api.url + WEBHOOK)
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        env.alerts.transition(
            "gpu-critical-xid", "node-a", "firing", from_state="pending", extra=gpu(3)
        )
        drain(env, worker)
        [first] = discord.messages
        discord.delete(first)
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        worker.close()
    post, patch, gone, repost = api.requests
    assert (post.method, post.path) == ("POST", WEBHOOK + "?wait=true")
    [embed] = post.json()["embeds"]
    assert embed["title"].startswith(f"🔴 Incident {incident_id} on node-a: Unhealthy")
    assert embed["url"] == f"https://fleet.example/incidents/{incident_id}"
    assert post.json()["allowed_mentions"] == {"parse": []}
    assert (patch.method, patch.path) == ("PATCH", f"{WEBHOOK}/messages/{first}")
    assert "2 alerts firing" in patch.json()["embeds"][0]["title"]
    assert (gone.method, gone.status) == ("PATCH", 404)
    assert (repost.method, repost.path) == ("POST", WEBHOOK + "?wait=true")
    [second] = discord.messages
    assert message_of(env, incident_id).ref == {"id": second}
    assert [s for _, s, _ in deliveries(env)] == ["delivered"] * 3


def test_alerts_of_no_incident_post_as_before_and_a_webhook_groups_by_its_labels(
    env: Env,
) -> None:
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        worker = make_worker(env)
        env.alerts.transition("node-stale", "node-b", "firing", from_state="pending")
        drain(env, worker)
        worker.close()
    [post] = api.requests
    body = post.json()
    assert post.path == "/api/chat.postMessage" and body["channel"] == CHANNEL
    assert body["blocks"][1]["text"]["text"].startswith("🔴 Critical: node-stale on node-b")
    assert deliveries(env) == [("firing", "delivered", None)]
    with session_scope(env.factory) as session:
        assert session.scalar(select(NotifyIncidentMessage.id)) is None


def test_pagerduty_and_alertmanager_group_an_incident_by_its_key(env: Env) -> None:
    with receiver() as pagerduty:
        add_channel(env, "pagerduty", pagerduty.url + "/v2/enqueue", secret="a" * 32)
        incident_id = open_incident(env)
        worker = make_worker(env)
        for index in (1, 3):
            env.alerts.transition(
                "gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(index)
            )
        drain(env, worker)
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(3))
        drain(env, worker)
        worker.close()
    events = [r.json() for r in pagerduty.requests]
    key = f"fleetwatch/incident/{incident_id}"
    assert [(e["event_action"], e["dedup_key"]) for e in events] == [
        ("trigger", key),
        ("trigger", key),
        ("trigger", key),  # one of two resolved: the incident still fires
        ("resolve", key),
    ]
    assert events[2]["payload"]["summary"].startswith("Resolved: gpu-lost on node-a")
    assert events[0]["payload"]["custom_details"]["incident"] == (
        f"https://fleet.example/incidents/{incident_id}"
    )


def test_an_incident_being_sent_by_another_worker_waits_for_it(env: Env) -> None:
    """A row of the incident leased by another worker (mid-send): this worker leaves the
    incident's other rows queued, so the message is never posted twice; once the lease is
    over they go out in one message."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        open_incident(env)
        for index in (1, 3):
            env.alerts.transition(
                "gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(index)
            )
        with session_scope(env.factory) as session:
            first = session.scalars(select(NotifyDelivery).order_by(NotifyDelivery.id)).first()
            assert first is not None
            first.leased_until = utcnow() + timedelta(minutes=1)
        worker = make_worker(env)
        worker.run_once()
        assert api.requests == []
        assert [(k, s) for k, s, _ in deliveries(env)] == [("firing", "queued")] * 2
        with session_scope(env.factory) as session:
            for row in session.scalars(select(NotifyDelivery)):
                row.leased_until = None  # the other worker's lease ran out
        drain(env, worker)
        worker.close()
    [post] = api.requests
    assert "2 alerts firing" in post.json()["text"]


def test_a_failed_slack_edit_is_retried_as_an_edit_or_posted_anew_when_refused_for_good(
    env: Env,
) -> None:
    """A 500 (or ``ratelimited``) retries the edit: still one message; an edit Slack refuses
    for good (``invalid_blocks``) is posted as a new message: the change is never lost."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        [first] = slack.messages
        slack.update_failures = [
            Answer(500, b"upstream error"),
            Answer(200, b'{"ok": false, "error": "ratelimited"}', {}),
        ]
        env.alerts.transition("gpu-xid", "node-a", "firing", from_state="pending", extra=gpu(3))
        drain(env, worker)
        assert list(slack.messages) == [first]
        assert "2 alerts firing" in slack.messages[first]["text"]
        slack.update_failures = [Answer(200, b'{"ok": false, "error": "invalid_blocks"}', {})]
        env.alerts.transition("gpu-xid", "node-a", "resolved", extra=gpu(3))
        drain(env, worker)
        worker.close()
    paths = [r.path for r in api.requests]
    assert paths == [
        "/api/chat.postMessage",
        "/api/chat.update",  # 500
        "/api/chat.update",  # ratelimited
        "/api/chat.update",
        "/api/chat.postMessage",  # the thread reply
        "/api/chat.update",  # invalid_blocks: refused for good
        "/api/chat.postMessage",  # posted anew
    ]
    second = next(ts for ts in slack.messages if ts != first)
    assert message_of(env, incident_id).ref == {"channel": CHANNEL, "ts": second}
    assert [s for _, s, _ in deliveries(env)] == ["delivered"] * 3


def test_a_slack_incident_moves_to_the_channel_set_since_and_the_channel_stays_working(
    env: Env,
) -> None:
    """The channel's Slack channel is changed mid-incident (the old one archived): the next
    change is posted to the new channel (the old message is in a channel no longer
    configured), by a restarted worker reading the stored reference, and the channel is
    not marked broken by an edit of the old channel's message."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        channel_id = add_channel(
            env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL}
        )
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        worker.close()
        [first] = slack.messages
        with session_scope(env.factory) as session:
            service.update_channel(
                session,
                channel_id=channel_id,
                data=ChannelUpdate(options={"channel": "C0NEWCHAN"}),
                box=env.box,
                allow_hosts=["127.0.0.1"],
            )
        # The old channel is archived: Slack refuses an edit there.
        slack.update_failures = [Answer(200, b'{"ok": false, "error": "is_archived"}', {})]
        worker = make_worker(env)  # the server restarted
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        worker.close()
    repost = api.requests[-1]
    assert (repost.path, repost.json()["channel"]) == ("/api/chat.postMessage", "C0NEWCHAN")
    second = next(ts for ts in slack.messages if ts != first)
    assert message_of(env, incident_id).ref == {"channel": "C0NEWCHAN", "ts": second}
    with session_scope(env.factory) as session:
        assert service.get_channel(session, channel_id=channel_id).broken is False
    assert [s for _, s, _ in deliveries(env)] == ["delivered", "delivered"]


def test_a_revoked_slack_token_marks_the_channel_broken_and_is_not_posted_anew(
    env: Env,
) -> None:
    """``token_revoked`` on an edit: the channel is broken (shown on the channels page with
    Slack's error), the row fails once, nothing is re-posted or retried in a loop; a new
    token clears it and the next change edits the same message."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        channel_id = add_channel(
            env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL}
        )
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        [first] = slack.messages
        slack.update_failures = [Answer(200, b'{"ok": false, "error": "token_revoked"}', {})]
        env.alerts.transition("gpu-xid", "node-a", "firing", from_state="pending", extra=gpu(3))
        drain(env, worker)
        with session_scope(env.factory) as session:
            channel = service.get_channel(session, channel_id=channel_id)
            assert channel.broken is True and "token_revoked" in (channel.last_error or "")
        assert [r.path for r in api.requests] == ["/api/chat.postMessage", "/api/chat.update"]
        assert [s for _, s, _ in deliveries(env)] == ["delivered", "failed"]
        with session_scope(env.factory) as session:
            service.update_channel(
                session,
                channel_id=channel_id,
                data=ChannelUpdate(secret=TOKEN),
                box=env.box,
                allow_hosts=["127.0.0.1"],
            )
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        worker.close()
    assert list(slack.messages) == [first]
    assert message_of(env, incident_id).ref == {"channel": CHANNEL, "ts": first}
    assert api.requests[-2].path == "/api/chat.update"


def test_an_alert_whose_edit_failed_for_good_is_still_shown_by_the_next_edit(env: Env) -> None:
    """Slack answers 500 to every edit until the row's deadline (an hour by default) passes:
    the row fails. The next change (the incident's close) edits the message in full: the
    alert whose row failed is in it, firing, not left out as if it never fired."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        [ts] = slack.messages
        slack.update_failures = [Answer(500, b"upstream error")] * 50
        env.alerts.transition("gpu-xid", "node-a", "firing", from_state="pending", extra=gpu(3))
        worker.close()
        worker = make_worker(env, deadline_s=1.5)  # the hour of failures, in a moment
        worker.run_once()  # the first failed edit
        time.sleep(1.6)
        drain(env, worker)
        assert [s for _, s, _ in deliveries(env)] == ["delivered", "failed"]
        slack.update_failures = []
        long_ago = utcnow() - timedelta(hours=1)
        change_incident(env, incident_id, opened_at=long_ago, last_event_at=long_ago)
        drain(env, worker)
        worker.close()
    assert list(slack.messages) == [ts]
    text = slack.messages[ts]["text"]
    assert "2 alerts firing" in text and text.endswith("· closed")
    assert "gpu-xid on node-a" in slack.messages[ts]["blocks"][2]["text"]["text"]


def test_a_close_whose_edit_failed_is_told_again_once_slack_answers(env: Env) -> None:
    """Every edit of the incident's close fails until the row's deadline (Slack down for the
    hour): once Slack answers again, the close is queued anew and the message says closed,
    instead of showing "open: closes at …" for good."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        worker.close()
        [ts] = slack.messages
        slack.update_failures = [Answer(503, b"unavailable")] * 50
        long_ago = utcnow() - timedelta(hours=1)
        change_incident(env, incident_id, opened_at=long_ago, last_event_at=long_ago)
        worker = make_worker(env, deadline_s=1.5)  # the hour of failures, in a moment
        with session_scope(env.factory) as session:
            assert enqueue_changes(session, now=utcnow(), quiet_s=180.0, deadline_s=1.5) == 1
        worker.run_once()
        time.sleep(1.6)
        worker.run_once()
        assert [(k, s) for k, s, _ in deliveries(env)] == [
            ("firing", "delivered"),
            ("incident", "failed"),
        ]
        assert "· open" in slack.messages[ts]["text"]
        slack.update_failures = []
        with session_scope(env.factory) as session:  # not before a deadline's length
            assert enqueue_changes(session, now=utcnow(), quiet_s=180.0, deadline_s=3600.0) == 0
            assert enqueue_changes(session, now=utcnow(), quiet_s=180.0, deadline_s=1.5) == 1
        drain(env, worker)
        worker.close()
    assert list(slack.messages) == [ts]
    assert slack.messages[ts]["text"].endswith("· closed")
    assert message_of(env, incident_id).closed_told_at is not None


def test_a_discord_edit_answered_429_waits_its_retry_after_and_edits_the_same_message(
    env: Env,
) -> None:
    """Discord's 429 on ``PATCH`` (``retry_after`` in the JSON body, no header): the edit
    is retried after it, as an edit: no second message."""
    discord = DiscordApi(WEBHOOK)
    limited = [Answer(429, b'{"message": "rate limited", "retry_after": 0.3, "global": false}')]

    def serve(got: Received) -> Answer:
        if got.method == "PATCH" and limited:
            return limited.pop()
        return discord(got)

    with receiver(serve=serve) as api:
        add_channel(env, "discord", api.url + WEBHOOK)
        incident_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        worker.run_once()  # the 429
        time.sleep(0.4)
        drain(env, worker)
        worker.close()
    post, limited_patch, patch = api.requests
    assert (post.method, post.path) == ("POST", WEBHOOK + "?wait=true")
    assert (limited_patch.method, limited_patch.status) == ("PATCH", 429)
    assert (patch.method, patch.status) == ("PATCH", 200)
    assert patch.at - limited_patch.at >= 0.3
    [only] = discord.messages
    assert message_of(env, incident_id).ref == {"id": only}
    assert "all alerts resolved" in discord.messages[only]["embeds"][0]["title"]


def test_two_incidents_of_one_node_in_quick_succession_have_a_message_each(env: Env) -> None:
    """Incident 1 closes; incident 2 opens on the same node a moment later: its alert posts
    a second message; the resolve of incident 1's alert edits the first, not the second."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        first_id = open_incident(env)
        worker = make_worker(env)
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        quiet = timedelta(seconds=env.settings.incident_quiet_s)
        closed_at = utcnow() - quiet - timedelta(seconds=5)
        change_incident(env, first_id, opened_at=closed_at, last_event_at=closed_at)
        drain(env, worker)
        [first_ts] = slack.messages
        now = utcnow()
        with session_scope(env.factory) as session:
            node_id = session.get_one(Incident, first_id).node_id
            second = Incident(
                node_id=node_id,
                opened_at=now,
                last_event_at=now,
                event_count=1,
                gpu_indexes=[5],
                xids=[48],
                kinds=["xid"],
                state="unhealthy",
                job_fatal=True,
                action_code="reset_gpu",
                action_text="reset the GPU",
                updated_at=now,
                test=False,
            )
            session.add(second)
            session.flush()
            second_id = second.id
        env.alerts.transition("gpu-xid", "node-a", "firing", from_state="pending", extra=gpu(5))
        drain(env, worker)
        second_ts = next(ts for ts in slack.messages if ts != first_ts)
        assert f"Incident {second_id} on node-a" in slack.messages[second_ts]["text"]
        env.alerts.transition("gpu-lost", "node-a", "resolved", extra=gpu(1))
        drain(env, worker)
        worker.close()
    assert len(slack.messages) == 2
    assert f"Incident {first_id} on node-a" in slack.messages[first_ts]["text"]
    assert "all alerts resolved · closed" in slack.messages[first_ts]["text"]
    assert "1 alert firing · open" in slack.messages[second_ts]["text"]
    assert "gpu-lost" not in slack.messages[second_ts]["blocks"][2]["text"]["text"]
    assert [i for _, _, i in deliveries(env)][-2:] == [second_id, first_id]


def test_an_alert_queued_before_its_incident_opened_joins_it_before_it_is_sent(
    env: Env,
) -> None:
    """The race between the evaluator and incident grouping: an alert of the node fires (its
    row queued, no incident yet) and, before the route's group wait ends, the kernel-log
    event of the same fault opens the incident. The page goes out as the incident's message,
    not as a plain message followed by a second one for the incident."""
    slack = SlackApi(TOKEN)
    with receiver(serve=slack) as api:
        add_channel(env, "slack_app", api.url + "/api", secret=TOKEN, options={"channel": CHANNEL})
        env.alerts.transition("gpu-lost", "node-a", "firing", from_state="pending", extra=gpu(1))
        assert [i for _, _, i in deliveries(env)] == [None]
        incident_id = open_incident(env)
        worker = make_worker(env)
        drain(env, worker)
        env.alerts.transition("gpu-xid", "node-a", "firing", from_state="pending", extra=gpu(1))
        drain(env, worker)
        worker.close()
    [ts] = slack.messages
    assert f"Incident {incident_id} on node-a" in slack.messages[ts]["text"]
    assert "2 alerts firing" in slack.messages[ts]["text"]
    assert [i for _, _, i in deliveries(env)] == [incident_id, incident_id]
