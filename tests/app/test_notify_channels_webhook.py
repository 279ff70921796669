"""Generic webhook: exact Alertmanager v4 bodies, split or truncated groups, and the HMAC
signature (known answer, verification, replay window, tampering)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.notify.channels import webhook
from app.notify.channels.base import ChannelConfig
from tests.app.test_notify_channels_common import (
    HOSTILE,
    T0,
    T_RESOLVED,
    UNICODE,
    bodies,
    hostile_notice,
    make_group,
    make_notice,
)

KIND = webhook.WebhookKind()
CONFIG = ChannelConfig(url="https://receiver.example/hook")
SECRET = "fleetwatch-secret"
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


def extra(i: int = 0, status: str = "firing") -> dict[str, Any]:
    return {
        "alert_id": 100 + i,
        "fingerprint": f"{i:016x}",
        "rule_name": "GpuHot",
        "severity": "critical",
        "team": "ml",
        "value": 91.5,
        "dashboard_url": f"https://fw.example/alerts/{100 + i}",
        "entity_url": f"https://fw.example/nodes/node-{i:03d}/gpus/{i % 8}",
        "ack_url": f"https://fw.example/ack/tok{i}" if status == "firing" else None,
        "runbook_url": "https://runbooks.example/gpu-hot",
    }


def test_a_firing_notice_is_an_alertmanager_v4_body() -> None:
    [request] = KIND.build(make_group([make_notice(0)]), CONFIG)
    assert request.url == CONFIG.url
    assert request.headers == {"Content-Type": "application/json", "User-Agent": "Fleetwatch"}
    assert bodies([request]) == [
        {
            "version": "4",
            "groupKey": "rule:GpuHot/cluster:c1",
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": "ml-oncall",
            "groupLabels": {"alertname": "GpuHot", "cluster": "c1"},
            "commonLabels": LABELS,
            "commonAnnotations": ANNOTATIONS,
            "externalURL": "https://fw.example",
            "alerts": [
                {
                    "status": "firing",
                    "labels": LABELS,
                    "annotations": ANNOTATIONS,
                    "startsAt": "2026-11-29T10:00:00Z",
                    "endsAt": "0001-01-01T00:00:00Z",
                    "generatorURL": "https://fw.example/alerts/100",
                    "fingerprint": "0000000000000000",
                }
            ],
            "fleetwatch": {"is_test": False, "part": 1, "parts": 1, "alerts": [extra()]},
        }
    ]


def test_a_resolved_group_ends_at_the_resolve_time_and_common_labels_are_shared_ones() -> None:
    notices = [make_notice(0, "resolved"), make_notice(1, "resolved")]
    [body] = bodies(KIND.build(make_group(notices), CONFIG))
    assert body["status"] == "resolved"
    assert [a["endsAt"] for a in body["alerts"]] == ["2026-11-29T10:12:30Z"] * 2
    assert [a["startsAt"] for a in body["alerts"]] == [
        "2026-11-29T10:00:00Z",
        "2026-11-29T10:00:01Z",
    ]
    assert body["commonLabels"] == {
        "alertname": "GpuHot",
        "cluster": "c1",
        "severity": "critical",
        "team": "ml",
    }
    assert body["commonAnnotations"] == {
        "description": "Temperature above 85 °C for 5m.",
        "runbook_url": "https://runbooks.example/gpu-hot",
    }
    assert body["fleetwatch"]["alerts"] == [extra(0, "resolved"), extra(1, "resolved")]


def test_labels_missing_alertname_severity_team_are_filled_from_the_notice() -> None:
    notice = make_notice(0, labels={"hostname": "n1"}, runbook_url=None)
    [body] = bodies(KIND.build(make_group([notice]), CONFIG))
    assert body["alerts"][0]["labels"] == {
        "alertname": "GpuHot",
        "hostname": "n1",
        "severity": "critical",
        "team": "ml",
    }
    assert "runbook_url" not in body["alerts"][0]["annotations"]


def test_a_group_of_120_is_one_body_by_default() -> None:
    [body] = bodies(KIND.build(make_group([make_notice(i) for i in range(120)]), CONFIG))
    assert [a["fingerprint"] for a in body["alerts"]] == [f"{i:016x}" for i in range(120)]
    assert body["truncatedAlerts"] == 0


def test_max_alerts_splits_into_several_bodies_so_none_is_lost() -> None:
    config = ChannelConfig(url=CONFIG.url, options={"max_alerts": "50"})
    messages = bodies(KIND.build(make_group([make_notice(i) for i in range(120)]), config))
    assert [len(m["alerts"]) for m in messages] == [50, 50, 20]
    assert [m["truncatedAlerts"] for m in messages] == [0, 0, 0]
    assert [(m["fleetwatch"]["part"], m["fleetwatch"]["parts"]) for m in messages] == [
        (1, 3),
        (2, 3),
        (3, 3),
    ]
    fingerprints = [a["fingerprint"] for m in messages for a in m["alerts"]]
    assert fingerprints == [f"{i:016x}" for i in range(120)]


def test_max_alerts_with_truncate_counts_the_dropped_alerts_like_alertmanager() -> None:
    config = ChannelConfig(url=CONFIG.url, options={"max_alerts": "50", "truncate": "true"})
    [body] = bodies(KIND.build(make_group([make_notice(i) for i in range(120)]), config))
    assert len(body["alerts"]) == 50
    assert body["truncatedAlerts"] == 70
    assert body["alerts"][-1]["fingerprint"] == f"{49:016x}"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_alerts": "-1"}, "options.max_alerts: must be a whole number"),
        ({"max_alerts": "ten"}, "options.max_alerts: must be a whole number"),
        ({"max_alerts": "²"}, "options.max_alerts: must be a whole number"),  # isdigit, not int
        ({"max_alerts": "9" * 5000}, "options.max_alerts: must be a whole number"),
        ({"truncate": "yes"}, "options.truncate: must be 'true' or 'false'"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        KIND.validate(ChannelConfig(url=CONFIG.url, options=options))


def test_hostile_text_is_sent_as_plain_json_data() -> None:
    [body] = bodies(KIND.build(make_group([hostile_notice()]), CONFIG))
    labels = body["alerts"][0]["labels"]
    assert (labels["owner"], labels["zone"], len(labels["blob"])) == (HOSTILE, UNICODE, 10_000)


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body_known_answer() -> None:
    # openssl: printf '1764410400.{"version":"4"}' | openssl dgst -sha256 -hmac fleetwatch-secret
    assert webhook.signature(SECRET, 1764410400, b'{"version":"4"}') == (
        "sha256=c6ee102c305c18dcc49ce7e34cdd4555ae69f532bbf0dd099a3ab0d6fc6bad32"
    )


def test_a_signed_request_carries_timestamp_and_signature_of_its_exact_body() -> None:
    config = ChannelConfig(url=CONFIG.url, secret=SECRET)
    sent_at = datetime(2026, 11, 29, 11, 0, 5, tzinfo=UTC)
    [request] = KIND.build(make_group([make_notice(0)], sent_at=sent_at), config)
    assert request.headers["X-Fleetwatch-Timestamp"] == "1795950005"
    assert request.headers["X-Fleetwatch-Signature"] == webhook.signature(
        SECRET, 1795950005, request.body
    )
    assert webhook.verify_signature(
        SECRET,
        request.headers["X-Fleetwatch-Timestamp"],
        request.body,
        request.headers["X-Fleetwatch-Signature"],
        now=sent_at + timedelta(seconds=2),
    )


def test_without_sent_at_the_timestamp_is_the_newest_notice_time() -> None:
    config = ChannelConfig(url=CONFIG.url, secret=SECRET)
    group = make_group([make_notice(0, "resolved"), make_notice(5)])
    assert webhook.send_timestamp(group) == int(T_RESOLVED.timestamp()) == 1795947150
    requests = KIND.build(group, config)
    assert requests[0].headers["X-Fleetwatch-Timestamp"] == "1795947150"
    assert webhook.send_timestamp(make_group([make_notice(3)])) == int(T0.timestamp()) + 3


def _signed() -> tuple[str, bytes, str, datetime]:
    body = b'{"version":"4","alerts":[]}'
    return (
        "1795950000",
        body,
        webhook.signature(SECRET, 1795950000, body),
        datetime.fromtimestamp(1795950000, UTC),
    )


def test_verify_signature_accepts_a_good_signature_inside_the_window() -> None:
    timestamp, body, signature, sent = _signed()
    assert webhook.verify_signature(SECRET, timestamp, body, signature, now=sent)
    assert webhook.verify_signature(
        SECRET, int(timestamp), body, signature, now=sent + timedelta(seconds=300)
    )
    assert webhook.verify_signature(
        SECRET, timestamp, body, signature, now=sent - timedelta(seconds=300)
    )


@pytest.mark.parametrize(
    "case",
    [
        "wrong_secret",
        "bad_signature",
        "expired",
        "future",
        "tampered_body",
        "tampered_time",
        "junk_time",
    ],
)
def test_verify_signature_refuses(case: str) -> None:
    timestamp, body, signature, sent = _signed()
    args: dict[str, Any] = {
        "secret": SECRET,
        "timestamp": timestamp,
        "body": body,
        "sig": signature,
        "now": sent,
    }
    if case == "wrong_secret":
        args["secret"] = "other-secret"
    elif case == "bad_signature":
        args["sig"] = "sha256=" + "0" * 64
    elif case == "expired":
        args["now"] = sent + timedelta(seconds=301)
    elif case == "future":
        args["now"] = sent - timedelta(seconds=301)
    elif case == "tampered_body":
        args["body"] = body.replace(b"[]", b"[1]")
    elif case == "tampered_time":
        args["timestamp"] = "1795950001"
    elif case == "junk_time":
        args["timestamp"] = "soon"
    assert not webhook.verify_signature(
        args["secret"], args["timestamp"], args["body"], args["sig"], now=args["now"]
    )


@pytest.mark.parametrize(
    ("status", "headers", "answer", "expected"),
    [
        (200, {}, b"ok", (True, "Webhook: HTTP 200", False, None, False)),
        (400, {}, b"bad json", (False, "Webhook: HTTP 400: bad json", False, None, False)),
        (404, {}, b"", (False, "Webhook: HTTP 404", False, None, True)),
        (410, {}, b"", (False, "Webhook: HTTP 410", False, None, True)),
        (429, {"Retry-After": "9"}, b"", (False, "Webhook: HTTP 429", True, 9.0, False)),
        (500, {}, b"boom", (False, "Webhook: HTTP 500: boom", True, None, False)),
    ],
)
def test_interpret_applies_the_http_rules(
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
    outcome = KIND.interpret(503, {"Retry-After": "Sun, 01 Jan 2100 00:00:00 GMT"}, b"")
    assert outcome.retryable and outcome.retry_after_s is not None and outcome.retry_after_s > 1e8


def test_an_alert_of_an_incident_carries_its_incident_label_and_link() -> None:
    from app.notify.channels import alertmanager

    notice = make_notice(0, incident_id=7, incident_url="https://fw.example/incidents/7")
    [body] = bodies(KIND.build(make_group([notice]), CONFIG))
    [entry] = body["alerts"]
    assert entry["labels"]["incident"] == "7"
    assert body["fleetwatch"]["alerts"][0]["incident_url"] == "https://fw.example/incidents/7"
    posted = alertmanager.postable_alert(notice)
    assert posted["labels"]["incident"] == "7"  # group_by: [incident] groups one fault
    assert (
        "incident"
        not in bodies(KIND.build(make_group([make_notice(1)]), CONFIG))[0]["alerts"][0]["labels"]
    )
