"""Discord webhook: exact embed payloads, splitting under Discord's embed limits, mentions that
cannot ping, escaped markdown, and 429 ``retry_after`` in the body."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from app.notify.channels import discord
from app.notify.channels.base import ChannelConfig
from tests.app.test_notify_channels_common import (
    UNICODE,
    bodies,
    hostile_notice,
    make_group,
    make_notice,
)
from tests.app.test_notify_channels_slack_app import long_incident

KIND = discord.DiscordKind()
CONFIG = ChannelConfig(url="https://discord.com/api/webhooks/1/tok")
LINKS = (
    "[Runbook](https://runbooks.example/gpu-hot) · [Acknowledge](https://fw.example/ack/tok0)"
    " · [Open in Fleetwatch](https://fw.example/alerts/100)"
)


def fields(i: int = 0) -> list[dict[str, Any]]:
    labels = [
        ("alertname", "GpuHot"),
        ("cluster", "c1"),
        ("gpu", str(i % 8)),
        ("hostname", f"node-{i:03d}"),
        ("severity", "critical"),
        ("team", "ml"),
    ]
    return [
        {"name": "Entity", "value": f"node-{i:03d} GPU {i % 8}", "inline": True},
        {"name": "Value", "value": "91.5", "inline": True},
        *({"name": n, "value": v, "inline": True} for n, v in labels),
    ]


def test_a_firing_notice_is_one_red_embed_that_pings_nobody() -> None:
    [request] = KIND.build(make_group([make_notice(0)]), CONFIG)
    assert request.url == CONFIG.url
    assert request.headers == {"Content-Type": "application/json"}
    assert bodies([request]) == [
        {
            "username": "Fleetwatch",
            "embeds": [
                {
                    "title": "🔴 Critical: GPU 0 on node-000 is hot",
                    "url": "https://fw.example/alerts/100",
                    "description": "Temperature above 85 °C for 5m.\n\n" + LINKS,
                    "color": 0xD0021B,
                    "fields": fields(),
                    "footer": {"text": "Fleetwatch · ml-oncall"},
                    "timestamp": "2026-11-29T10:00:00Z",
                }
            ],
            "allowed_mentions": {"parse": []},
        }
    ]


def test_a_resolved_notice_is_green_stamped_with_its_resolve_time() -> None:
    [body] = bodies(KIND.build(make_group([make_notice(0, "resolved")]), CONFIG))
    assert body["embeds"] == [
        {
            "title": "✅ Resolved: GPU 0 on node-000 is hot",
            "url": "https://fw.example/alerts/100",
            "description": "Temperature above 85 °C for 5m.\n\n"
            "[Runbook](https://runbooks.example/gpu-hot)"
            " · [Open in Fleetwatch](https://fw.example/alerts/100)",
            "color": 0x2EB886,
            "fields": fields(),
            "footer": {"text": "Fleetwatch · ml-oncall"},
            "timestamp": "2026-11-29T10:12:30Z",
        }
    ]


def test_a_test_message_says_so_and_warning_and_info_have_their_colours() -> None:
    notices = [make_notice(0, severity="warning"), make_notice(1, severity="info")]
    [body] = bodies(KIND.build(make_group(notices, is_test=True), CONFIG))
    assert body["content"] == "Fleetwatch test message"
    assert [e["color"] for e in body["embeds"]] == [0xF5A623, 0x4A90D9]
    assert [e["title"][:10] for e in body["embeds"]] == ["🟠 Warning:", "🔵 Info: GP"]


def _check_limits(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        assert message["allowed_mentions"] == {"parse": []}
        assert len(message["embeds"]) <= discord.MAX_EMBEDS
        assert sum(discord.embed_chars(e) for e in message["embeds"]) <= 6000
        for embed in message["embeds"]:
            assert len(embed["title"]) <= 256
            assert len(embed["description"]) <= 4096
            assert len(embed["fields"]) <= 25
            assert all(
                len(f["name"]) <= 256 and 0 < len(f["value"]) <= 1024 for f in embed["fields"]
            )
            assert len(embed["footer"]["text"]) <= 2048


def test_120_notices_are_split_into_messages_of_10_embeds_in_order() -> None:
    messages = bodies(KIND.build(make_group([make_notice(i) for i in range(120)]), CONFIG))
    assert len(messages) == 12
    _check_limits(messages)
    assert [m["content"] for m in messages] == [f"Fleetwatch · part {p}/12" for p in range(1, 13)]
    urls = [e["url"] for m in messages for e in m["embeds"]]
    assert urls == [f"https://fw.example/alerts/{100 + i}" for i in range(120)]


def test_120_hostile_notices_respect_the_6000_character_total_and_lose_none() -> None:
    messages = bodies(KIND.build(make_group([hostile_notice(i) for i in range(120)]), CONFIG))
    _check_limits(messages)
    urls = [e["url"] for m in messages for e in m["embeds"]]
    assert urls == [f"https://fw.example/alerts/{100 + i}" for i in range(120)]


def test_hostile_text_is_escaped_and_cut() -> None:
    [body] = bodies(KIND.build(make_group([hostile_notice()]), CONFIG))
    [embed] = body["embeds"]
    named = {f["name"]: f["value"] for f in embed["fields"]}
    assert named["owner"] == (
        "\\<!everyone> @everyone @here \\*bold\\* \\_it\\_ \\`code\\` "
        "\\[x\\]\\(https://evil.example\\) &amp; \\<b>"
    )
    assert named["zone"] == UNICODE
    assert named["blob"] == "x" * 199 + "…"
    assert discord.units(embed["title"]) == 256 and embed["title"].endswith("…")
    assert len(embed["title"]) == 255  # 🔴 is two UTF-16 code units
    assert embed["description"].startswith("\\<!everyone> @everyone")
    assert embed["description"].endswith("\n\n" + LINKS)


def test_limits_are_counted_in_utf16_units_so_emoji_never_overflow() -> None:
    assert discord.units("a🔥é") == 4
    assert discord.fit("🔥" * 10, 7) == "🔥🔥🔥…"
    assert discord.fit("abc", 3) == "abc"


def test_a_runbook_url_with_parentheses_cannot_break_the_masked_link() -> None:
    notice = make_notice(0, runbook_url="https://wiki.example/GPU_(hot) page")
    [body] = bodies(KIND.build(make_group([notice]), CONFIG))
    assert (
        "[Runbook](https://wiki.example/GPU_%28hot%29%20page)" in body["embeds"][0]["description"]
    )


def test_too_many_labels_are_summarised_in_one_field() -> None:
    labels = {f"l{n:02d}": "v" for n in range(40)}
    [body] = bodies(KIND.build(make_group([make_notice(0, labels=labels)]), CONFIG))
    embed_fields = body["embeds"][0]["fields"]
    assert len(embed_fields) == 2 + 18 + 1
    assert embed_fields[-1] == {"name": "Labels", "value": "22 more not shown"}


@pytest.mark.parametrize(
    ("status", "headers", "answer", "expected"),
    [
        (204, {}, b"", (True, "Discord: HTTP 204", False, None, False)),
        (200, {}, b'{"id": "1"}', (True, "Discord: HTTP 200", False, None, False)),
        (
            400,
            {},
            b'{"embeds": ["0"], "message": "Invalid Form Body"}',
            (
                False,
                'Discord: HTTP 400: {"embeds": ["0"], "message": "Invalid Form Body"}',
                False,
                None,
                False,
            ),
        ),
        (
            401,
            {},
            b'{"message": "Invalid Webhook Token", "code": 50027}',
            (
                False,
                'Discord: HTTP 401: {"message": "Invalid Webhook Token", "code": 50027}',
                False,
                None,
                True,
            ),
        ),
        (
            404,
            {},
            b'{"message": "Unknown Webhook", "code": 10015}',
            (
                False,
                'Discord: HTTP 404: {"message": "Unknown Webhook", "code": 10015}',
                False,
                None,
                True,
            ),
        ),
        (410, {}, b"", (False, "Discord: HTTP 410", False, None, True)),
        (
            429,
            {},
            b'{"message": "You are being rate limited.", "retry_after": 0.523, "global": false}',
            (
                False,
                'Discord: HTTP 429: {"message": "You are being rate limited.", '
                '"retry_after": 0.523, "global": false}',
                True,
                0.523,
                False,
            ),
        ),
        (
            429,
            {"Retry-After": "3"},
            b'{"retry_after": 2.5}',
            (False, 'Discord: HTTP 429: {"retry_after": 2.5}', True, 3.0, False),
        ),
        (
            429,
            {"Retry-After": "1"},
            b'{"retry_after": 4.25}',
            (False, 'Discord: HTTP 429: {"retry_after": 4.25}', True, 4.25, False),
        ),
        (
            429,
            {"Retry-After": "5"},
            b"not json",
            (False, "Discord: HTTP 429: not json", True, 5.0, False),
        ),
        (500, {}, b"", (False, "Discord: HTTP 500", True, None, False)),
    ],
)
def test_interpret_reads_discord_answers(
    status: int, headers: dict[str, str], answer: bytes, expected: tuple[Any, ...]
) -> None:
    outcome = KIND.interpret(status, headers, answer)
    assert (
        outcome.ok,
        outcome.detail,
        outcome.retryable,
        outcome.retry_after_s,
        outcome.broken,
    ) == expected


def test_interpret_reads_an_http_date_retry_after() -> None:
    outcome = KIND.interpret(429, {"Retry-After": "Sun, 01 Jan 2100 00:00:00 GMT"}, b"")
    assert outcome.retryable and outcome.retry_after_s is not None and outcome.retry_after_s > 1e8


def test_a_long_incident_message_keeps_whole_alert_links_under_the_description_limit() -> None:
    notices, incident = long_incident()
    body = json.loads(KIND.build_post(make_group(notices, incident=incident), CONFIG).body)
    description = body["embeds"][0]["description"]
    assert discord.units(description) <= discord.DESCRIPTION_CHARS
    assert discord.embed_chars(body["embeds"][0]) <= discord.MESSAGE_EMBED_CHARS
    facts, _, alerts = description.partition("\n\n")
    assert "**Suggested action:**" in facts and "**Status:** open" in facts
    lines = alerts.split("\n")
    shown = [line for line in lines if line.startswith("[")]
    link = r"\[[^\[\]]+\]\(https://fw\.example/alerts/\d+\)"
    assert shown and all(re.fullmatch(link, line) for line in shown)
    assert lines[-1] == f"and {40 - len(shown)} more alerts"
