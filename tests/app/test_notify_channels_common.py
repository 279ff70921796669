"""Shared helpers of the channel kinds (truncation, entity, times, packing, safe snippets), the
registry, and the notice/group factories the per-kind test files import."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.notify.channels import common
from app.notify.channels.base import (
    AlertNotice,
    ChannelConfig,
    ChannelKind,
    NoticeGroup,
    OutboundRequest,
)
from app.notify.channels.registry import KINDS, UnknownKindError, get_kind

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
T_RESOLVED = T0 + timedelta(minutes=12, seconds=30)
HOSTILE = "<!everyone> @everyone @here *bold* _it_ `code` [x](https://evil.example) &amp; <b>"
UNICODE = "Größe – 温度 🔥"


def make_notice(i: int = 0, status: str = "firing", **overrides: Any) -> AlertNotice:
    """Notice ``i`` of rule GpuHot on node-<i> GPU <i % 8>; resolved notices end at
    ``T_RESOLVED`` and have no ack link."""
    host, gpu = f"node-{i:03d}", str(i % 8)
    fields: dict[str, Any] = {
        "alert_id": 100 + i,
        "fingerprint": f"{i:016x}",
        "rule_name": "GpuHot",
        "status": status,
        "severity": "critical",
        "team": "ml",
        "labels": {
            "alertname": "GpuHot",
            "severity": "critical",
            "team": "ml",
            "hostname": host,
            "gpu": gpu,
            "cluster": "c1",
        },
        "annotations": {
            "summary": f"GPU {gpu} on {host} is hot",
            "description": "Temperature above 85 °C for 5m.",
        },
        "value": 91.5,
        "starts_at": T0 + timedelta(seconds=i),
        "ends_at": T_RESOLVED if status == "resolved" else None,
        "dashboard_url": f"https://fw.example/alerts/{100 + i}",
        "entity_url": f"https://fw.example/nodes/{host}/gpus/{gpu}",
        "ack_url": f"https://fw.example/ack/tok{i}" if status == "firing" else None,
        "runbook_url": "https://runbooks.example/gpu-hot",
    }
    fields.update(overrides)
    return AlertNotice(**fields)


def make_group(notices: list[AlertNotice], **overrides: Any) -> NoticeGroup:
    """A group of ``notices`` for receiver ml-oncall."""
    fields: dict[str, Any] = {
        "group_key": "rule:GpuHot/cluster:c1",
        "receiver": "ml-oncall",
        "notices": tuple(notices),
        "external_url": "https://fw.example",
        "group_labels": {"alertname": "GpuHot", "cluster": "c1"},
    }
    fields.update(overrides)
    return NoticeGroup(**fields)


def hostile_notice(i: int = 0, long_chars: int = 10_000) -> AlertNotice:
    """Markup, mentions, non-ASCII and a very long label / description."""
    base = make_notice(i)
    labels = {**base.labels, "owner": HOSTILE, "zone": UNICODE, "blob": "x" * long_chars}
    annotations = {"summary": HOSTILE + " " + "y" * long_chars, "description": HOSTILE * 400}
    return replace(base, labels=labels, annotations=annotations)


def bodies(requests: list[OutboundRequest]) -> list[Any]:
    """Each request's body parsed as JSON."""
    return [json.loads(r.body) for r in requests]


def test_truncate_keeps_short_text_and_marks_cut_text_with_an_ellipsis() -> None:
    assert common.truncate("abc", 3) == "abc"
    assert common.truncate("abcdef", 4) == "abc…"
    assert common.truncate("abcdef", 0) == ""


def test_truncate_escaped_never_leaves_a_lone_backslash_before_the_ellipsis() -> None:
    assert common.truncate_escaped("ab\\*cd", 4) == "ab…"
    assert common.truncate_escaped("a\\\\bcd", 4) == "a\\\\…"


def test_entity_text_prefers_hostname_and_gpu_then_cluster_then_fleet() -> None:
    assert common.entity_text(make_notice(3)) == "node-003 GPU 3"
    assert common.entity_text(make_notice(labels={"hostname": "n1"})) == "n1"
    assert common.entity_text(make_notice(labels={"cluster": "c9"})) == "c9"
    assert common.entity_text(make_notice(labels={})) == "fleet"


def test_rfc3339_writes_utc_with_z_and_microseconds_only_when_set() -> None:
    assert common.rfc3339(T0) == "2026-11-29T10:00:00Z"
    assert common.rfc3339(T0.replace(microsecond=250000)) == "2026-11-29T10:00:00.25Z"
    paris = T0.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    assert common.rfc3339(paris) == "2026-11-29T10:00:00Z"


def test_pack_keeps_order_and_every_item() -> None:
    chunks = common.pack(list(range(7)), fits=lambda c: sum(c) <= 6, max_items=3)
    assert chunks == [[0, 1, 2], [3], [4], [5], [6]]
    assert common.pack([9], fits=lambda c: False) == [[9]]


def test_safe_snippet_replaces_urls_and_collapses_whitespace() -> None:
    body = b"bad hook https://hooks.slack.com/services/T/B/secret\n\n  again"
    assert common.safe_snippet(body) == "bad hook [url] again"


def test_severity_words_and_icons_say_the_state_without_colour() -> None:
    assert (common.severity_icon(make_notice()), common.severity_word(make_notice())) == (
        "🔴",
        "Critical",
    )
    resolved = make_notice(status="resolved")
    assert (common.severity_icon(resolved), common.severity_word(resolved)) == ("✅", "Resolved")
    odd = make_notice(severity="page")
    assert (common.severity_icon(odd), common.severity_word(odd)) == ("⚪", "Page")


def test_registry_lists_every_kind_by_its_name() -> None:
    assert sorted(KINDS) == [
        "alertmanager",
        "discord",
        "pagerduty",
        "slack",
        "slack_app",
        "teams",
        "webhook",
    ]
    defaults = {
        "pagerduty": "https://events.pagerduty.com/v2/enqueue",
        "slack_app": "https://slack.com/api",
    }
    for name, kind in KINDS.items():
        assert isinstance(kind, ChannelKind)
        assert kind.kind == name
        assert get_kind(name) is kind
        assert kind.default_url == defaults.get(name)


def test_get_kind_names_the_allowed_kinds_for_an_unknown_one() -> None:
    with pytest.raises(UnknownKindError) as caught:
        get_kind("email")
    assert str(caught.value) == (
        "kind: unknown channel kind 'email'; "
        "one of alertmanager, discord, pagerduty, slack, slack_app, teams, webhook"
    )
    assert isinstance(caught.value, KeyError)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_no_kind_puts_the_url_or_secret_in_the_outcome(name: str) -> None:
    secret_url = "https://hooks.example/services/T0/B0/s3cr3tT0k3n"
    echo = f"error posting to {secret_url}: no_service".encode()
    for status in (200, 400, 404, 429, 500):
        outcome = get_kind(name).interpret(status, {}, echo)
        assert "s3cr3t" not in outcome.detail
        assert "hooks.example" not in outcome.detail


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_sends_every_notice_of_a_group(name: str) -> None:
    config = ChannelConfig(
        url="https://hooks.example/x", secret="a" * 32, options={"channel": "C0123ABCD"}
    )
    requests = get_kind(name).build(make_group([make_notice(i) for i in range(120)]), config)
    text = b"".join(r.body for r in requests).decode()
    for i in range(120):
        assert f'https://fw.example/alerts/{100 + i}"' in text


@pytest.mark.parametrize("name", sorted(KINDS))
def test_an_empty_group_makes_no_request(name: str) -> None:
    config = ChannelConfig(
        url="https://hooks.example/x", secret="a" * 32, options={"channel": "C0123ABCD"}
    )
    assert get_kind(name).build(make_group([]), config) == []


def test_escape_markdown_escapes_specials_and_line_start_marks_only() -> None:
    text = "a*b\n- x\n  + y\n# h\n> q\n12. n\n3.5 GB -1"
    assert common.escape_markdown(text, "*") == (
        "a\\*b\n\\- x\n  \\+ y\n\\# h\n\\> q\n12\\. n\n3.5 GB -1"
    )
