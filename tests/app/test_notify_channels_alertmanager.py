"""Forwarding to Alertmanager: the exact postable-alerts array, the API URL, and answers."""

from __future__ import annotations

from typing import Any

import pytest

from app.notify.channels import alertmanager
from app.notify.channels.base import ChannelConfig
from tests.app.test_notify_channels_common import (
    HOSTILE,
    bodies,
    hostile_notice,
    make_group,
    make_notice,
)

KIND = alertmanager.AlertmanagerKind()
CONFIG = ChannelConfig(url="http://alertmanager.internal:9093/")
LABELS = {
    "alertname": "GpuHot",
    "cluster": "c1",
    "gpu": "0",
    "hostname": "node-000",
    "severity": "critical",
    "team": "ml",
}
ANNOTATIONS = {
    "description": "Temperature above 85 °C for 5m.",
    "runbook_url": "https://runbooks.example/gpu-hot",
    "summary": "GPU 0 on node-000 is hot",
}


def test_a_firing_notice_is_posted_without_ends_at() -> None:
    [request] = KIND.build(make_group([make_notice(0)]), CONFIG)
    assert request.url == "http://alertmanager.internal:9093/api/v2/alerts"
    assert request.headers == {"Content-Type": "application/json"}
    assert bodies([request]) == [
        [
            {
                "labels": LABELS,
                "annotations": ANNOTATIONS,
                "startsAt": "2026-11-29T10:00:00Z",
                "generatorURL": "https://fw.example/alerts/100",
            }
        ]
    ]


def test_a_resolved_notice_ends_at_its_resolve_time() -> None:
    [body] = bodies(KIND.build(make_group([make_notice(0, "resolved")]), CONFIG))
    assert body == [
        {
            "labels": LABELS,
            "annotations": ANNOTATIONS,
            "startsAt": "2026-11-29T10:00:00Z",
            "endsAt": "2026-11-29T10:12:30Z",
            "generatorURL": "https://fw.example/alerts/100",
        }
    ]


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://am:9093", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/", "http://am:9093/api/v2/alerts"),
        ("https://am.example/prefix/", "https://am.example/prefix/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts"),
    ],
)
def test_the_alerts_api_path_is_appended_once(base: str, expected: str) -> None:
    assert alertmanager.alerts_url(base) == expected


def test_120_notices_are_one_array_in_order() -> None:
    [body] = bodies(KIND.build(make_group([make_notice(i) for i in range(120)]), CONFIG))
    assert [a["labels"]["hostname"] for a in body] == [f"node-{i:03d}" for i in range(120)]


def test_hostile_text_is_forwarded_as_data() -> None:
    [body] = bodies(KIND.build(make_group([hostile_notice()]), CONFIG))
    assert body[0]["labels"]["owner"] == HOSTILE


@pytest.mark.parametrize(
    ("status", "headers", "answer", "expected"),
    [
        (200, {}, b"", (True, "Alertmanager: HTTP 200", False, None, False)),
        (
            400,
            {},
            b'{"code":400,"message":"start time must be before end time"}',
            (
                False,
                "Alertmanager: HTTP 400: "
                '{"code":400,"message":"start time must be before end time"}',
                False,
                None,
                False,
            ),
        ),
        (
            404,
            {},
            b"404 page not found",
            (False, "Alertmanager: HTTP 404: 404 page not found", False, None, True),
        ),
        (410, {}, b"", (False, "Alertmanager: HTTP 410", False, None, True)),
        (429, {"Retry-After": "2"}, b"", (False, "Alertmanager: HTTP 429", True, 2.0, False)),
        (500, {}, b"", (False, "Alertmanager: HTTP 500", True, None, False)),
        (
            503,
            {"Retry-After": "Sun, 01 Jan 2090 00:00:00 GMT"},
            b"",
            (False, "Alertmanager: HTTP 503", True, "later", False),
        ),
    ],
)
def test_interpret_reads_alertmanager_answers(
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
    if wait == "later":
        assert outcome.retry_after_s is not None and outcome.retry_after_s > 1e8
    else:
        assert outcome.retry_after_s == wait
