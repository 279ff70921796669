"""Generic webhook: an Alertmanager webhook (version 4) body, optionally HMAC-signed.

The body is what Alertmanager's ``webhook_config`` receiver POSTs (``version``, ``groupKey``,
``truncatedAlerts``, ``status``, ``receiver``, ``groupLabels``, ``commonLabels``,
``commonAnnotations``, ``externalURL``, ``alerts[]`` with ``status``, ``labels``,
``annotations``, ``startsAt``, ``endsAt`` — ``0001-01-01T00:00:00Z`` while firing —,
``generatorURL``, ``fingerprint``), so existing Alertmanager receivers read it unchanged.
Fleetwatch's own fields (alert ids, value, acknowledge links, split parts) are under the
``fleetwatch`` key.

When the channel has a secret, requests carry ``X-Fleetwatch-Timestamp`` (Unix seconds) and
``X-Fleetwatch-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>." + body>``; receivers check
them with :func:`verify_signature` (see docs/notifications.md, "Generic webhook").

Options: ``max_alerts`` (alerts per body, 0 = no limit); ``truncate`` = ``true`` drops the
alerts over ``max_alerts`` and counts them in ``truncatedAlerts`` as Alertmanager does;
otherwise (the default) the group is split into several bodies so no alert is lost.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime
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
from app.whole_numbers import parse_whole

TIMESTAMP_HEADER = "X-Fleetwatch-Timestamp"
SIGNATURE_HEADER = "X-Fleetwatch-Signature"
SIGNATURE_PREFIX = "sha256="
DEFAULT_TOLERANCE_S = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 keyed with ``secret`` (UTF-8) over ``b"<timestamp>." +
    body``."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def signed_headers(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The two signature headers for ``body`` sent at ``timestamp`` (Unix seconds)."""
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }


def verify_signature(
    secret: str,
    timestamp: str | int,
    body: bytes,
    signature_header: str,
    *,
    now: datetime,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> bool:
    """True when ``signature_header`` is the HMAC of ``body`` at ``timestamp`` and that
    timestamp is within ``tolerance_s`` seconds of ``now`` (either side: replay window).
    Compares in constant time (``hmac.compare_digest``); any malformed input is False."""
    try:
        sent = int(str(timestamp).strip())
    except ValueError:
        return False
    if abs(now.timestamp() - sent) > tolerance_s:
        return False
    expected = signature(secret, sent, body)
    return hmac.compare_digest(expected.encode(), signature_header.strip().encode())


def _annotations(notice: AlertNotice) -> dict[str, str]:
    annotations = dict(notice.annotations)
    if notice.runbook_url and "runbook_url" not in annotations:
        annotations["runbook_url"] = notice.runbook_url
    return dict(sorted(annotations.items()))


def _labels(notice: AlertNotice) -> dict[str, str]:
    labels = dict(notice.labels)
    labels.setdefault("alertname", notice.rule_name)
    labels.setdefault("severity", notice.severity)
    if notice.team:
        labels.setdefault("team", notice.team)
    if notice.incident_id is not None:
        # Alertmanager groups by labels: group_by: [incident] puts one fault's alerts together.
        labels.setdefault("incident", str(notice.incident_id))
    return dict(sorted(labels.items()))


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def alert(notice: AlertNotice) -> dict[str, Any]:
    """One ``alerts[]`` entry as Alertmanager's webhook writes it."""
    ends = notice.ends_at if notice.status == "resolved" and notice.ends_at else None
    return {
        "status": notice.status,
        "labels": _labels(notice),
        "annotations": _annotations(notice),
        "startsAt": common.rfc3339(notice.starts_at),
        "endsAt": common.rfc3339(ends) if ends else common.ALERTMANAGER_ZERO_TIME,
        "generatorURL": notice.dashboard_url,
        "fingerprint": notice.fingerprint,
    }


def _extra(notice: AlertNotice) -> dict[str, Any]:
    incident = (
        {"incident_id": notice.incident_id, "incident_url": notice.incident_url}
        if notice.incident_id is not None
        else {}
    )
    return {
        "alert_id": notice.alert_id,
        "fingerprint": notice.fingerprint,
        "rule_name": notice.rule_name,
        "severity": notice.severity,
        "team": notice.team,
        "value": notice.value,
        "dashboard_url": notice.dashboard_url,
        "entity_url": notice.entity_url,
        "ack_url": notice.ack_url,
        "runbook_url": notice.runbook_url,
        **incident,
    }


def webhook_body(
    group: NoticeGroup, notices: list[AlertNotice], *, truncated: int, part: int, parts: int
) -> dict[str, Any]:
    """The webhook v4 body for ``notices`` (``truncated`` more left out of this body)."""
    alerts = [alert(n) for n in notices]
    return {
        "version": "4",
        "groupKey": group.group_key,
        "truncatedAlerts": truncated,
        "status": "firing" if any(n.status == "firing" for n in notices) else "resolved",
        "receiver": group.receiver,
        "groupLabels": dict(sorted(group.group_labels.items())),
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": group.external_url,
        "alerts": alerts,
        "fleetwatch": {
            "is_test": group.is_test,
            "part": part,
            "parts": parts,
            "alerts": [_extra(n) for n in notices],
        },
    }


def _max_alerts(config: ChannelConfig) -> int:
    raw = config.options.get("max_alerts", "0").strip() or "0"
    value = parse_whole(raw, low=0, high=1_000_000)
    if value is None:
        raise ValueError("options.max_alerts: must be a whole number ≥ 0 (0 = no limit)")
    return value


def _truncate(config: ChannelConfig) -> bool:
    raw = config.options.get("truncate", "false").strip().lower()
    if raw not in ("true", "false"):
        raise ValueError("options.truncate: must be 'true' or 'false'")
    return raw == "true"


def send_timestamp(group: NoticeGroup) -> int:
    """Unix seconds for the signature: ``group.sent_at``, else the newest notice time (start
    or end) so the kind needs no clock."""
    if group.sent_at is not None:
        return int(group.sent_at.timestamp())
    times = [n.ends_at or n.starts_at for n in group.notices]
    return int(max(times).timestamp()) if times else 0


class WebhookKind(ChannelKind):
    """Any HTTPS endpoint that accepts Alertmanager's webhook JSON."""

    kind = "webhook"

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """One body, or one per ``max_alerts`` notices (split mode), signed when a secret is
        set; none for an empty group. Raises ``ValueError`` for bad options (see
        :meth:`validate`)."""
        limit = _max_alerts(config)
        notices = list(group.notices)
        if not notices:
            return []
        if limit and _truncate(config):
            chunks = [notices[:limit]]
            truncated = len(notices) - len(chunks[0])
            if truncated:
                common.note_cut(f"{truncated} alerts left out (max_alerts {limit}, truncate)")
        else:
            chunks = common.pack(notices, fits=lambda _: True, max_items=limit or None)
            truncated = 0
        timestamp = send_timestamp(group)
        requests = []
        start = 0
        for part, chunk in enumerate(chunks, start=1):
            start += len(chunk)
            covers = tuple(range(start - len(chunk), start)) if not truncated else None
            data = common.json_bytes(
                webhook_body(group, chunk, truncated=truncated, part=part, parts=len(chunks))
            )
            headers = {"Content-Type": "application/json", "User-Agent": "Fleetwatch"}
            if config.secret:
                headers.update(signed_headers(config.secret, timestamp, data))
            requests.append(
                OutboundRequest(url=config.url, body=data, headers=headers, covers=covers)
            )
        return requests

    def validate(self, config: ChannelConfig) -> None:
        """``options.max_alerts`` a whole number, ``options.truncate`` true/false."""
        _max_alerts(config)
        _truncate(config)

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """The default HTTP rules with a URL-free ``detail``."""
        return common.safe_interpret("Webhook", status_code, headers, body)
