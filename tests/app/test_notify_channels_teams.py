"""Microsoft Teams Workflows webhook: exact Adaptive Card payloads, splitting under the ~28 KB
limit, markdown escaping, and errors hidden in 200/202 answers."""

from __future__ import annotations

from typing import Any

import pytest

from app.notify.channels import teams
from app.notify.channels.base import ChannelConfig
from tests.app.test_notify_channels_common import (
    UNICODE,
    bodies,
    hostile_notice,
    make_group,
    make_notice,
)

KIND = teams.TeamsKind()
CONFIG = ChannelConfig(url="https://prod-00.westus.logic.azure.com/workflows/abc?sig=s3cret")


def open_url(title: str, url: str) -> dict[str, str]:
    return {"type": "Action.OpenUrl", "title": title, "url": url}


def label_facts(i: int = 0) -> list[dict[str, str]]:
    return [
        {"title": "alertname", "value": "GpuHot"},
        {"title": "cluster", "value": "c1"},
        {"title": "gpu", "value": str(i % 8)},
        {"title": "hostname", "value": f"node-{i:03d}"},
        {"title": "severity", "value": "critical"},
        {"title": "team", "value": "ml"},
    ]


def card(body: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "msteams": {"width": "Full"},
                    "body": body,
                },
            }
        ],
    }


def heading(text: str = "Fleetwatch · ml-oncall") -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "isSubtle": True, "wrap": True}


def title(text: str, color: str) -> dict[str, Any]:
    return {
        "type": "TextBlock",
        "text": text,
        "weight": "Bolder",
        "size": "Medium",
        "color": color,
        "wrap": True,
        "separator": True,
    }


DESCRIPTION = {"type": "TextBlock", "text": "Temperature above 85 °C for 5m.", "wrap": True}


def test_a_firing_notice_is_one_adaptive_card_with_facts_and_open_url_actions() -> None:
    [request] = KIND.build(make_group([make_notice(0)]), CONFIG)
    assert request.url == CONFIG.url
    assert request.headers == {"Content-Type": "application/json; charset=utf-8"}
    assert bodies([request]) == [
        card(
            [
                heading(),
                title("🔴 Critical: GPU 0 on node-000 is hot", "Attention"),
                {
                    "type": "FactSet",
                    "facts": [
                        {"title": "Entity", "value": "node-000 GPU 0"},
                        {"title": "Value", "value": "91.5"},
                        {"title": "Since", "value": "2026-11-29T10:00:00Z"},
                        *label_facts(),
                    ],
                },
                DESCRIPTION,
                {
                    "type": "ActionSet",
                    "actions": [
                        open_url("Runbook", "https://runbooks.example/gpu-hot"),
                        open_url("Acknowledge", "https://fw.example/ack/tok0"),
                        open_url("Open in Fleetwatch", "https://fw.example/alerts/100"),
                    ],
                },
            ]
        )
    ]


def test_a_resolved_notice_is_green_with_its_resolve_time_and_no_acknowledge() -> None:
    [body] = bodies(KIND.build(make_group([make_notice(0, "resolved")]), CONFIG))
    assert body == card(
        [
            heading(),
            title("✅ Resolved: GPU 0 on node-000 is hot", "Good"),
            {
                "type": "FactSet",
                "facts": [
                    {"title": "Entity", "value": "node-000 GPU 0"},
                    {"title": "Value", "value": "91.5"},
                    {"title": "Resolved at", "value": "2026-11-29T10:12:30Z"},
                    *label_facts(),
                ],
            },
            DESCRIPTION,
            {
                "type": "ActionSet",
                "actions": [
                    open_url("Runbook", "https://runbooks.example/gpu-hot"),
                    open_url("Open in Fleetwatch", "https://fw.example/alerts/100"),
                ],
            },
        ]
    )


def test_120_notices_are_split_into_cards_under_28_kb_in_order() -> None:
    requests = KIND.build(make_group([make_notice(i) for i in range(120)]), CONFIG)
    assert len(requests) > 1
    parts = len(requests)
    urls = []
    for part, (request, body) in enumerate(zip(requests, bodies(requests), strict=True), start=1):
        assert len(request.body) <= teams.MAX_PAYLOAD_BYTES
        elements = body["attachments"][0]["content"]["body"]
        assert elements[0] == heading(f"Fleetwatch · ml-oncall · part {part}/{parts}")
        urls += [e["actions"][-1]["url"] for e in elements if e["type"] == "ActionSet"]
    assert urls == [f"https://fw.example/alerts/{100 + i}" for i in range(120)]


def test_hostile_text_is_escaped_and_a_huge_notice_is_shrunk_to_fit() -> None:
    requests = KIND.build(make_group([hostile_notice(0, long_chars=40_000)]), CONFIG)
    [request] = requests
    assert len(request.body) <= teams.MAX_PAYLOAD_BYTES
    elements = bodies(requests)[0]["attachments"][0]["content"]["body"]
    facts = {f["title"]: f["value"] for f in elements[2]["facts"]}
    assert facts["owner"].startswith(
        "<!everyone> @everyone @here \\*bold\\* \\_it\\_ \\`code\\` \\[x\\]"
    )
    assert facts["zone"] == UNICODE
    assert facts["blob"].endswith("…") and len(facts["blob"]) <= 300
    assert elements[1]["text"].endswith("…")


def test_a_notice_too_big_for_a_card_is_shown_with_fewer_labels_and_shorter_texts() -> None:
    many = {f"label_{n:03d}": "🔥" * 300 for n in range(200)}  # 4 bytes a character in UTF-8
    notice = make_notice(0, labels=many, annotations={"summary": "s", "description": "d" * 50_000})
    [request] = KIND.build(make_group([notice]), CONFIG)
    assert len(request.body) <= teams.MAX_PAYLOAD_BYTES
    body = bodies([request])[0]["attachments"][0]["content"]["body"]
    facts = body[2]["facts"]
    assert facts[-1] == {"title": "Labels", "value": "190 more not shown"}
    assert facts[3] == {"title": "label\\_000", "value": "🔥" * 99 + "…"}
    assert body[3]["text"] == "d" * 499 + "…"


def test_escape_handles_line_start_marks_and_card_functions() -> None:
    assert teams.escape("- item\n# head\n1. one {{DATE(x)}}") == (
        "\\- item\n\\# head\n1\\. one {\u200b{DATE(x)}}"
    )


TOO_LARGE = (
    b"Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error "
    b"413 with ContextId tcid=0,server=msgapi-production-eus-azsc2-4-170,cv=deadbeef"
)
THROTTLED = (
    b"Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 429"
)


@pytest.mark.parametrize(
    ("status", "headers", "answer", "expected"),
    [
        (202, {}, b"", (True, "Teams: HTTP 202", False, None, False)),
        (200, {}, b"1", (True, "Teams: HTTP 200", False, None, False)),
        (
            200,
            {},
            TOO_LARGE,
            (False, "Teams: HTTP 200 with error: " + TOO_LARGE.decode(), False, None, False),
        ),
        (
            202,
            {"Retry-After": "7"},
            THROTTLED,
            (False, "Teams: HTTP 202 with error: " + THROTTLED.decode(), True, 7.0, False),
        ),
        (
            200,
            {},
            b'{"error": {"code": "413", "message": "Payload too large"}}',
            (
                False,
                "Teams: HTTP 200 with error: HTTP error 413: Payload too large",
                False,
                None,
                False,
            ),
        ),
        (
            200,
            {},
            b'{"error": "Request throttled"}',
            (False, "Teams: HTTP 200 with error: Request throttled", True, None, False),
        ),
        (400, {}, b"Bad Request", (False, "Teams: HTTP 400: Bad Request", False, None, False)),
        (404, {}, b"", (False, "Teams: HTTP 404", False, None, True)),
        (410, {}, b"", (False, "Teams: HTTP 410", False, None, True)),
        (429, {"Retry-After": "12"}, b"", (False, "Teams: HTTP 429", True, 12.0, False)),
        (500, {}, b"oops", (False, "Teams: HTTP 500: oops", True, None, False)),
    ],
)
def test_interpret_reads_errors_in_the_body_as_well_as_the_status(
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


def test_120_hostile_notices_stay_under_the_size_limit_and_lose_none() -> None:
    requests = KIND.build(make_group([hostile_notice(i) for i in range(120)]), CONFIG)
    assert all(len(r.body) <= teams.MAX_PAYLOAD_BYTES for r in requests)
    urls = [
        e["actions"][-1]["url"]
        for body in bodies(requests)
        for e in body["attachments"][0]["content"]["body"]
        if e["type"] == "ActionSet"
    ]
    assert urls == [f"https://fw.example/alerts/{100 + i}" for i in range(120)]
