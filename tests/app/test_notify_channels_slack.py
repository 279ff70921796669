"""Slack incoming webhook: exact Block Kit payloads, splitting under Slack's limits, mrkdwn
escaping of hostile labels, and how Slack's answers are read."""

from __future__ import annotations

from typing import Any

import pytest

from app.notify.channels import slack
from app.notify.channels.base import ChannelConfig
from tests.app.test_notify_channels_common import (
    HOSTILE,
    UNICODE,
    bodies,
    hostile_notice,
    make_group,
    make_notice,
)

KIND = slack.SlackKind()
CONFIG = ChannelConfig(url="https://hooks.slack.com/services/T0/B0/tok")
ENTITY = "<https://fw.example/nodes/node-000/gpus/0|node-000 GPU 0>"
RUNBOOK = "https://runbooks.example/gpu-hot"


def button(text: str, url: str, action_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "url": url,
        "action_id": action_id,
        **extra,
    }


LABELS = "`alertname=GpuHot` `cluster=c1` `gpu=0` `hostname=node-000` `severity=critical` `team=ml`"


def test_a_firing_notice_is_one_message_with_header_section_and_buttons() -> None:
    [request] = KIND.build(make_group([make_notice(0)]), CONFIG)
    assert request.url == CONFIG.url
    assert request.method == "POST"
    assert request.headers == {"Content-Type": "application/json; charset=utf-8"}
    assert bodies([request]) == [
        {
            "text": "🔴 Critical: GPU 0 on node-000 is hot",
            "blocks": [
                {
                    "type": "context",
                    "elements": [{"type": "mrkdwn", "text": "Fleetwatch · ml-oncall"}],
                },
                {
                    "type": "header",
                    "text": {
                        "type": "plain_text",
                        "text": "🔴 Critical: GPU 0 on node-000 is hot",
                        "emoji": True,
                    },
                },
                {
                    "type": "section",
                    "text": {
                        "type": "mrkdwn",
                        "text": f"*Entity:* {ENTITY}\n"
                        "*Value:* 91.5\n*Since:* 2026-11-29T10:00:00Z\n"
                        f"*Labels:* {LABELS}\nTemperature above 85 °C for 5m.",
                    },
                },
                {
                    "type": "actions",
                    "elements": [
                        button("Runbook", RUNBOOK, "runbook-0"),
                        button(
                            "Acknowledge",
                            "https://fw.example/ack/tok0",
                            "ack-0",
                            style="primary",
                        ),
                        button("Open in Fleetwatch", "https://fw.example/alerts/100", "open-0"),
                    ],
                },
            ],
        }
    ]


def test_a_resolved_notice_says_resolved_and_has_no_acknowledge_button() -> None:
    [body] = bodies(KIND.build(make_group([make_notice(0, "resolved")]), CONFIG))
    assert body["text"] == "✅ Resolved: GPU 0 on node-000 is hot"
    assert body["blocks"][1]["text"]["text"] == "✅ Resolved: GPU 0 on node-000 is hot"
    assert body["blocks"][2]["text"]["text"] == (
        f"*Entity:* {ENTITY}\n"
        "*Value:* 91.5\n*Resolved at:* 2026-11-29T10:12:30Z\n"
        f"*Labels:* {LABELS}\nTemperature above 85 °C for 5m."
    )
    assert body["blocks"][3]["elements"] == [
        button("Runbook", RUNBOOK, "runbook-0"),
        button("Open in Fleetwatch", "https://fw.example/alerts/100", "open-0"),
    ]


def test_a_notice_without_value_entity_url_or_runbook_leaves_them_out() -> None:
    notice = make_notice(0, value=None, entity_url=None, runbook_url=None, labels={})
    [body] = bodies(KIND.build(make_group([notice], is_test=True), CONFIG))
    assert body["blocks"][0]["elements"][0]["text"] == "Fleetwatch test message · ml-oncall"
    assert body["blocks"][2]["text"]["text"] == (
        "*Entity:* fleet\n*Since:* 2026-11-29T10:00:00Z\nTemperature above 85 °C for 5m."
    )
    assert [b["action_id"] for b in body["blocks"][3]["elements"]] == ["ack-0", "open-0"]


def test_120_notices_are_split_into_messages_of_16_in_order_within_slack_limits() -> None:
    requests = KIND.build(make_group([make_notice(i) for i in range(120)]), CONFIG)
    messages = bodies(requests)
    assert len(messages) == 8
    seen = []
    for part, message in enumerate(messages, start=1):
        blocks = message["blocks"]
        assert len(blocks) <= slack.MAX_BLOCKS
        assert (
            blocks[0]["elements"][0]["text"]
            == f"Fleetwatch · ml-oncall · 120 alerts · part {part}/8"
        )
        for block in blocks[1:]:
            if block["type"] == "actions":
                seen.append(block["elements"][-1]["url"])
    assert seen == [f"https://fw.example/alerts/{100 + i}" for i in range(120)]
    assert [len(m["blocks"]) for m in messages] == [49] * 7 + [1 + 3 * 8]
    assert messages[7]["text"] == "🔴 Critical: GPU 0 on node-112 is hot (+7 more)"
    action_ids = [
        e["action_id"]
        for m in messages
        for b in m["blocks"]
        if b["type"] == "actions"
        for e in b["elements"]
    ]
    assert len(action_ids) == len(set(action_ids)) == 360


def test_hostile_label_text_is_escaped_and_cut_to_slack_limits() -> None:
    [body] = bodies(KIND.build(make_group([hostile_notice()]), CONFIG))
    header = body["blocks"][1]["text"]["text"]
    section = body["blocks"][2]["text"]["text"]
    assert len(header) == slack.HEADER_CHARS
    assert header.endswith("…")
    assert header.startswith("🔴 Critical: " + HOSTILE)  # plain_text: shown as typed
    assert len(section) == slack.SECTION_CHARS
    assert section.endswith("…")
    assert "<!everyone>" not in section and "<b>" not in section
    assert (
        "`owner=&lt;!everyone&gt; @everyone @here *bold* _it_ 'code' "
        "[x](https://evil.example) &amp;amp; &lt;b&gt;`" in section
    )
    assert f"`zone={UNICODE}`" in section
    assert "`blob=" + "x" * 194 + "…`" in section
    description = section.split("\n", 4)[4]
    assert description.startswith("&lt;!everyone&gt; @everyone @here *bold*")
    assert body["text"].startswith("🔴 Critical: &lt;!everyone&gt;")


def test_a_cut_never_leaves_half_an_html_entity() -> None:
    notice = make_notice(0, labels={}, annotations={"description": "&" * 5000, "summary": "s"})
    [body] = bodies(KIND.build(make_group([notice]), CONFIG))
    section = body["blocks"][2]["text"]["text"]
    assert section.endswith("&amp;…")
    assert len(section) <= slack.SECTION_CHARS


def test_a_button_url_over_3000_chars_is_left_out_rather_than_failing_the_message() -> None:
    notice = make_notice(0, runbook_url="https://runbooks.example/" + "r" * 3000)
    [body] = bodies(KIND.build(make_group([notice]), CONFIG))
    assert [b["action_id"] for b in body["blocks"][3]["elements"]] == ["ack-0", "open-0"]


@pytest.mark.parametrize(
    ("status", "headers", "answer", "expected"),
    [
        (200, {}, b"ok", (True, "Slack: HTTP 200", False, None, False)),
        (
            400,
            {},
            b"invalid_payload",
            (False, "Slack: HTTP 400: invalid_payload", False, None, False),
        ),
        (400, {}, b"no_text", (False, "Slack: HTTP 400: no_text", False, None, False)),
        (
            403,
            {},
            b"action_prohibited",
            (False, "Slack: HTTP 403: action_prohibited", False, None, False),
        ),
        (404, {}, b"no_service", (False, "Slack: HTTP 404: no_service", False, None, True)),
        (
            404,
            {},
            b"channel_not_found",
            (False, "Slack: HTTP 404: channel_not_found", False, None, True),
        ),
        (
            410,
            {},
            b"channel_is_archived",
            (False, "Slack: HTTP 410: channel_is_archived", False, None, True),
        ),
        (
            429,
            {"Retry-After": "30"},
            b"rate_limited",
            (False, "Slack: HTTP 429: rate_limited", True, 30.0, False),
        ),
        (
            429,
            {"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"},
            b"rate_limited",
            (False, "Slack: HTTP 429: rate_limited", True, "positive", False),
        ),
        (500, {}, b"", (False, "Slack: HTTP 500", True, None, False)),
    ],
)
def test_interpret_reads_slack_answers(
    status: int, headers: dict[str, str], answer: bytes, expected: tuple[Any, ...]
) -> None:
    outcome = KIND.interpret(status, headers, answer)
    ok, detail, retryable, wait, broken = expected
    assert (outcome.ok, outcome.detail, outcome.retryable, outcome.broken) == (
        ok,
        detail,
        retryable,
        broken,
    )
    if wait == "positive":
        assert outcome.retry_after_s is not None and outcome.retry_after_s > 0
    else:
        assert outcome.retry_after_s == wait


def test_120_hostile_notices_respect_every_slack_limit_and_lose_none() -> None:
    messages = bodies(KIND.build(make_group([hostile_notice(i) for i in range(120)]), CONFIG))
    urls = []
    for message in messages:
        assert len(message["blocks"]) <= slack.MAX_BLOCKS
        for block in message["blocks"]:
            if block["type"] == "header":
                assert len(block["text"]["text"]) <= slack.HEADER_CHARS
            elif block["type"] == "section":
                assert len(block["text"]["text"]) <= slack.SECTION_CHARS
            elif block["type"] == "actions":
                assert all(len(e["text"]["text"]) <= 75 for e in block["elements"])
                urls.append(block["elements"][-1]["url"])
    assert urls == [f"https://fw.example/alerts/{100 + i}" for i in range(120)]
