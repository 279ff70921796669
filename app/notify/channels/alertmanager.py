"""Forwarding to an existing Prometheus Alertmanager: ``POST {url}/api/v2/alerts``.

The body is a JSON array of "postable alerts" (Alertmanager's OpenAPI ``postableAlerts``):
``labels``, ``annotations``, ``startsAt``, ``endsAt`` and ``generatorURL``. Resolved notices
carry ``endsAt`` = the resolve time, which resolves the alert there. Firing notices leave
``endsAt`` out: Alertmanager then resolves them after its ``resolve_timeout`` (5 minutes by
default) unless they are sent again, as Prometheus does on each evaluation: Fleetwatch re-posts
every firing alert (acknowledged ones too: they still fire) every third of the channel's
``resolve_timeout_s`` option (default 300, Alertmanager's default), whatever the route's repeat
interval (:func:`app.notify.outbox.enqueue_repeats`). Answers: 200 ok, 400 invalid alerts
(permanent), 5xx retryable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.notify.channels import common
from app.notify.channels.base import (
    AlertNotice,
    ChannelConfig,
    ChannelKind,
    NoticeGroup,
    OutboundRequest,
    Outcome,
)
from app.notify.channels.webhook import alert as webhook_alert

API_PATH = "/api/v2/alerts"
DEFAULT_RESOLVE_TIMEOUT_S = 300.0
#: A third of it (the re-post period) stays longer than the worker's repeat scan
#: (:data:`app.notify.jobs.REPEAT_SCAN_S`, 15 s), so a post lost between scans is not the
#: last one Alertmanager hears before its timeout: at 30 s posts came 15–18 s apart.
MIN_RESOLVE_TIMEOUT_S = 60.0


def resolve_timeout_s(options: Mapping[str, str]) -> float:
    """The Alertmanager's ``resolve_timeout`` in seconds (option ``resolve_timeout_s``, default
    300). Raises ``ValueError`` naming the option when it is not a number ≥ 60."""
    raw = options.get("resolve_timeout_s", "").strip()
    if not raw:
        return DEFAULT_RESOLVE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not MIN_RESOLVE_TIMEOUT_S <= value <= 86400:
        raise ValueError("options.resolve_timeout_s: seconds from 60 to 86400 (Alertmanager's)")
    return value


def repost_interval_s(options: Mapping[str, str]) -> float:
    """How often a firing alert is posted again: a third of the resolve timeout, so two posts
    may be lost before Alertmanager would resolve it (an unreadable option → the default)."""
    try:
        return resolve_timeout_s(options) / 3
    except ValueError:
        return DEFAULT_RESOLVE_TIMEOUT_S / 3


def alerts_url(base_url: str) -> str:
    """``base_url`` + ``/api/v2/alerts`` (no double slash; a URL already ending in the API path
    is kept)."""
    base = base_url.rstrip("/")
    return base if base.endswith(API_PATH) else base + API_PATH


def postable_alert(notice: AlertNotice) -> dict[str, Any]:
    """One postable alert: the labels and annotations of the generic webhook's alert (with
    ``alertname``, ``severity``, ``team`` and ``runbook_url`` filled in)."""
    source = webhook_alert(notice)
    result: dict[str, Any] = {
        "labels": source["labels"],
        "annotations": source["annotations"],
        "startsAt": source["startsAt"],
    }
    if notice.status == "resolved" and notice.ends_at is not None:
        result["endsAt"] = common.rfc3339(notice.ends_at)
    result["generatorURL"] = notice.dashboard_url
    return result


class AlertmanagerKind(ChannelKind):
    """An Alertmanager reachable from Fleetwatch (``url`` is its base URL)."""

    kind = "alertmanager"

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """One POST holding every notice of the group, in order (none for an empty group)."""
        if not group.notices:
            return []
        body = [postable_alert(n) for n in group.notices]
        return [
            OutboundRequest(
                url=alerts_url(config.url),
                body=common.json_bytes(body),
                headers={"Content-Type": "application/json"},
            )
        ]

    def validate(self, config: ChannelConfig) -> None:
        """``options.resolve_timeout_s``, when set, is a number of seconds ≥ 60."""
        resolve_timeout_s(config.options)

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """The default HTTP rules (200 ok, 400 permanent, 5xx retryable), URL-free detail."""
        return common.safe_interpret("Alertmanager", status_code, headers, body)
