"""PagerDuty Events API v2: one exact event per notice, dedup keys shared by trigger and
resolve, field limits, and how PagerDuty's answers are read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.notify.channels import pagerduty
from app.notify.channels.base import ChannelConfig
from tests.app.test_notify_channels_common import (
    HOSTILE,
    bodies,
    hostile_notice,
    make_group,
    make_notice,
)

KIND = pagerduty.PagerDutyKind()
ROUTING_KEY = "R0123456789abcdef0123456789ABCDE"
CONFIG = ChannelConfig(url="", secret=ROUTING_KEY)


def test_a_firing_notice_triggers_one_event_with_every_field() -> None:
    [request] = KIND.build(make_group([make_notice(0)]), CONFIG)
    assert request.url == "https://events.pagerduty.com/v2/enqueue" == KIND.default_url
    assert request.headers == {"Content-Type": "application/json"}
    assert bodies([request]) == [
        {
            "routing_key": ROUTING_KEY,
            "event_action": "trigger",
            "dedup_key": "fleetwatch/0000000000000000/100",
            "payload": {
                "summary": "Critical: GPU 0 on node-000 is hot",
                "source": "node-000",
                "severity": "critical",
                "timestamp": "2026-11-29T10:00:00Z",
                "component": "GPU 0",
                "group": "ml",
                "class": "GpuHot",
                "custom_details": {
                    "labels": {
                        "alertname": "GpuHot",
                        "cluster": "c1",
                        "gpu": "0",
                        "hostname": "node-000",
                        "severity": "critical",
                        "team": "ml",
                    },
                    "value": 91.5,
                    "description": "Temperature above 85 °C for 5m.",
                    "entity": "node-000 GPU 0",
                },
            },
            "links": [
                {"href": "https://fw.example/alerts/100", "text": "Open in Fleetwatch"},
                {"href": "https://runbooks.example/gpu-hot", "text": "Runbook"},
            ],
            "client": "Fleetwatch",
            "client_url": "https://fw.example/alerts/100",
        }
    ]


def test_a_resolved_notice_resolves_with_the_same_dedup_key() -> None:
    [firing] = bodies(KIND.build(make_group([make_notice(0)]), CONFIG))
    [resolved] = bodies(KIND.build(make_group([make_notice(0, "resolved")]), CONFIG))
    assert resolved == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": "fleetwatch/0000000000000000/100",
    }
    assert firing["dedup_key"] == resolved["dedup_key"]


def test_a_later_instance_of_the_same_rule_and_entity_gets_a_new_dedup_key() -> None:
    first = pagerduty.dedup_key(make_notice(0))
    again = pagerduty.dedup_key(make_notice(0, alert_id=999))
    assert first != again == "fleetwatch/0000000000000000/999"


def test_a_long_fingerprint_gives_a_hashed_dedup_key_within_255_chars() -> None:
    key = pagerduty.dedup_key(make_notice(0, fingerprint="f" * 300))
    assert len(key) == len("fleetwatch/sha256:") + 64 <= 255
    assert key == pagerduty.dedup_key(make_notice(0, fingerprint="f" * 300))


@pytest.mark.parametrize(
    ("severity", "expected"),
    [("critical", "critical"), ("warning", "warning"), ("info", "info"), ("page", "warning")],
)
def test_severity_is_mapped_to_pagerdutys_four(severity: str, expected: str) -> None:
    [body] = bodies(KIND.build(make_group([make_notice(0, severity=severity)]), CONFIG))
    assert body["payload"]["severity"] == expected


def test_120_notices_make_120_events_in_order_to_an_overridden_url() -> None:
    config = ChannelConfig(url="https://pd-proxy.internal/v2/enqueue", secret=ROUTING_KEY)
    requests = KIND.build(make_group([make_notice(i) for i in range(120)]), config)
    assert {r.url for r in requests} == {"https://pd-proxy.internal/v2/enqueue"}
    keys = [b["dedup_key"] for b in bodies(requests)]
    assert keys == [f"fleetwatch/{i:016x}/{100 + i}" for i in range(120)]


def test_hostile_text_is_kept_as_data_and_the_summary_cut_to_1024() -> None:
    [body] = bodies(KIND.build(make_group([hostile_notice()]), CONFIG))
    summary = body["payload"]["summary"]
    assert len(summary) == 1024 and summary.endswith("…")
    assert summary.startswith("Critical: " + HOSTILE)
    assert body["payload"]["custom_details"]["labels"]["owner"] == HOSTILE


def test_a_notice_without_host_or_gpu_still_has_a_source_and_component() -> None:
    notice = make_notice(0, labels={"cluster": "c2"}, team=None, value=None, runbook_url=None)
    [body] = bodies(KIND.build(make_group([notice]), CONFIG))
    payload = body["payload"]
    assert (payload["source"], payload["component"], payload["group"]) == (
        "fleetwatch",
        "node",
        "c2",
    )
    assert "value" not in payload["custom_details"]
    assert body["links"] == [
        {"href": "https://fw.example/alerts/100", "text": "Open in Fleetwatch"}
    ]


def test_the_routing_key_is_required_and_checked() -> None:
    with pytest.raises(ValueError, match=r"^secret: the PagerDuty integration"):
        KIND.validate(ChannelConfig(url=""))
    with pytest.raises(ValueError, match=r"^secret: a PagerDuty routing key is 32"):
        KIND.validate(ChannelConfig(url="", secret="short"))
    KIND.validate(CONFIG)
    with pytest.raises(ValueError, match=r"^secret:"):
        KIND.build(make_group([make_notice(0)]), ChannelConfig(url=""))


INVALID = json.dumps(
    {
        "status": "invalid event",
        "message": "Event object is invalid",
        "errors": ["'payload.summary' is missing"],
    }
).encode()


@pytest.mark.parametrize(
    ("status", "headers", "answer", "expected"),
    [
        (
            202,
            {},
            b'{"status": "success", "message": "Event processed", "dedup_key": "k"}',
            (True, "PagerDuty: HTTP 202", False, None, False),
        ),
        (
            400,
            {},
            INVALID,
            (
                False,
                "PagerDuty: HTTP 400: Event object is invalid; 'payload.summary' is missing",
                False,
                None,
                False,
            ),
        ),
        (404, {}, b"Not Found", (False, "PagerDuty: HTTP 404: Not Found", False, None, False)),
        (410, {}, b"", (False, "PagerDuty: HTTP 410", False, None, False)),
        (429, {"Retry-After": "60"}, b"", (False, "PagerDuty: HTTP 429", True, 60.0, False)),
        (
            500,
            {},
            b"Internal Server Error",
            (False, "PagerDuty: HTTP 500: Internal Server Error", True, None, False),
        ),
        (503, {}, b"", (False, "PagerDuty: HTTP 503", True, None, False)),
    ],
)
def test_interpret_reads_pagerduty_answers(
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


def test_an_incident_is_one_dedup_key_resolved_only_with_its_last_alert() -> None:
    url = "https://fw.example/incidents/7"
    firing = make_notice(0, incident_id=7, incident_url=url, incident_firing=1)
    others_fire = make_notice(1, "resolved", incident_id=7, incident_url=url, incident_firing=1)
    last = make_notice(2, "resolved", incident_id=7, incident_url=url, incident_firing=0)
    events = bodies(KIND.build(make_group([firing, others_fire, last]), CONFIG))
    assert [(e["event_action"], e["dedup_key"]) for e in events] == [
        ("trigger", "fleetwatch/incident/7"),
        ("trigger", "fleetwatch/incident/7"),
        ("resolve", "fleetwatch/incident/7"),
    ]
    assert events[0]["payload"]["custom_details"]["incident"] == url
    assert events[0]["payload"]["custom_details"]["incident_alerts_firing"] == 2
    assert events[1]["payload"]["summary"] == "Resolved: GPU 1 on node-001 is hot"
    assert events[1]["payload"]["custom_details"]["incident_alerts_firing"] == 1
