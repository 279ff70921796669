"""The Slack app kind (Web API) without the network: the incident message's exact requests,
Slack's ``ok``/``error`` answers read into outcomes, and its settings checked."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from app.notify.channels import slack_app
from app.notify.channels.base import AlertNotice, ChannelConfig, IncidentCard
from tests.app.test_notify_channels_common import T0, make_group, make_notice

KIND = slack_app.SlackAppKind()
CONFIG = ChannelConfig(url="", secret="xoxb-1-2-abc", options={"channel": "C0123ABCD"})


def card(**overrides: object) -> IncidentCard:
    fields: dict[str, object] = {
        "id": 7,
        "hostname": "node-000",
        "url": "https://fw.example/incidents/7",
        "opened_at": T0,
        "last_event_at": T0 + timedelta(seconds=40),
        "closes_at": T0 + timedelta(seconds=220),
        "open": True,
        "state": "unhealthy",
        "job_fatal": True,
        "gpu_indexes": (0, 3),
        "xids": (79,),
        "action_text": "drain the node & power-cycle it",
        "changes": ("Critical firing: GPU 3 on node-003 is hot",),
    }
    fields.update(overrides)
    return IncidentCard(**fields)  # type: ignore[arg-type]


def test_the_incident_message_is_posted_to_the_channel_with_the_bot_token() -> None:
    group = make_group([make_notice(0), make_notice(3, "resolved")], incident=card())
    request = KIND.build_post(group, CONFIG)
    assert request.url == "https://slack.com/api/chat.postMessage"
    assert request.headers["Authorization"] == "Bearer xoxb-1-2-abc"
    body = json.loads(request.body)
    assert body["channel"] == "C0123ABCD"
    assert body["text"] == "🔴 Incident 7 on node-000: Unhealthy, job-fatal · 1 alert firing · open"
    facts = body["blocks"][1]["text"]["text"]
    assert "*GPUs:* 0, 3" in facts and "drain the node &amp; power-cycle it" in facts
    lines = body["blocks"][2]["text"]["text"].split("\n")
    assert lines[0].startswith("<https://fw.example/alerts/100|🔴 Critical: GPU 0 on node-000")
    assert "✅ Resolved: GPU 3 on node-003 is hot (GpuHot) at" in lines[1]


def test_an_update_edits_the_message_and_replies_in_its_thread() -> None:
    group = make_group([make_notice(0)], incident=card(open=False))
    update, reply = KIND.build_update(group, CONFIG, {"channel": "C0123ABCD", "ts": "1.000200"})
    assert update.url.endswith("/chat.update") and reply.url.endswith("/chat.postMessage")
    edited = json.loads(update.body)
    assert (edited["channel"], edited["ts"]) == ("C0123ABCD", "1.000200")
    assert edited["text"].endswith("· closed")
    assert json.loads(reply.body) == {
        "channel": "C0123ABCD",
        "thread_ts": "1.000200",
        "text": "Critical firing: GPU 3 on node-003 is hot",
    }
    quiet = make_group([make_notice(0)], incident=card(changes=()))
    assert len(KIND.build_update(quiet, CONFIG, {"channel": "C0123ABCD", "ts": "1.2"})) == 1


@pytest.mark.parametrize(
    ("status", "answer", "ok", "retryable", "broken", "gone"),
    [
        (200, {"ok": True, "channel": "C1", "ts": "1.2"}, True, False, False, False),
        (200, {"ok": False, "error": "message_not_found"}, False, False, False, True),
        (200, {"ok": False, "error": "edit_window_closed"}, False, False, False, True),
        (200, {"ok": False, "error": "invalid_auth"}, False, False, True, False),
        (200, {"ok": False, "error": "channel_not_found"}, False, False, True, False),
        (200, {"ok": False, "error": "ratelimited"}, False, True, False, False),
        (429, {"ok": False, "error": "ratelimited"}, False, True, False, False),
        (200, {"ok": False, "error": "invalid_blocks"}, False, False, False, False),
    ],
)
def test_slack_answers_are_read_from_ok_and_error(
    status: int, answer: dict[str, object], ok: bool, retryable: bool, broken: bool, gone: bool
) -> None:
    body = json.dumps(answer).encode()
    outcome = KIND.interpret(status, {"Retry-After": "3"} if status == 429 else {}, body)
    assert (outcome.ok, outcome.retryable, outcome.broken) == (ok, retryable, broken)
    assert KIND.message_gone(status, body) is gone
    if not ok:
        assert str(answer["error"]) in outcome.detail
    assert KIND.message_ref(body) == ({"channel": "C1", "ts": "1.2"} if ok else None)


def test_the_settings_need_a_bot_token_and_a_channel_id() -> None:
    KIND.validate(CONFIG)
    with pytest.raises(ValueError, match="secret: the Slack app's bot token"):
        KIND.validate(ChannelConfig(url="", secret=None, options={"channel": "C0123ABCD"}))
    with pytest.raises(ValueError, match=r"options\.channel: the Slack channel ID"):
        KIND.validate(ChannelConfig(url="", secret="xoxb-1", options={"channel": "#gpu-ops"}))


def long_incident() -> tuple[list[AlertNotice], IncidentCard]:
    """40 alerts with 260-character summaries and an incident whose action text is 4,800
    characters of ``&`` (escaped to ``&amp;``): each section is past Slack's 3,000."""
    notices = [
        replace(make_notice(i), annotations={"summary": f"Xid 79 on GPU {i % 8} " + "z" * 240})
        for i in range(40)
    ]
    return notices, card(gpu_indexes=tuple(range(8)), action_text="a & b " * 800)


def test_a_long_incident_keeps_whole_alert_links_and_says_how_many_are_not_shown() -> None:
    notices, incident = long_incident()
    body = json.loads(KIND.build_post(make_group(notices, incident=incident), CONFIG).body)
    facts, alerts = (body["blocks"][i]["text"]["text"] for i in (1, 2))
    assert len(facts) <= 3000 and len(alerts) <= 3000
    lines = alerts.split("\n")
    shown = [line for line in lines if line.startswith("<")]
    assert shown and all(
        re.fullmatch(r"<https://fw\.example/alerts/\d+\|[^<>|]+>", s) for s in shown
    )
    assert lines[-1] == f"and {40 - len(shown)} more alerts"
    assert "*Suggested action:*" in facts and "*Status:* open" in facts
    assert re.search(r"&(?!amp;|lt;|gt;)", facts) is None  # never an entity cut in two


def test_a_thread_reply_of_many_changes_keeps_whole_lines_and_counts_the_rest() -> None:
    changes = tuple(f"Critical firing: Xid 79 & 48 on GPU {i} " + "w" * 80 for i in range(60))
    group = make_group([make_notice(0)], incident=card(changes=changes))
    _update, reply = KIND.build_update(group, CONFIG, {"channel": "C0123ABCD", "ts": "1.2"})
    text = json.loads(reply.body)["text"]
    lines = text.split("\n")
    assert len(text) <= 3000
    assert all(line.endswith("w" * 80) for line in lines[:-1])
    assert lines[-1] == f"and {60 - (len(lines) - 1)} more changes"
    assert re.search(r"&(?!amp;|lt;|gt;)", text) is None
