"""PagerDuty Events API v2: one event per notice (``trigger`` when firing, ``resolve`` when
resolved), so PagerDuty opens and closes one incident per alert instance — or, for the alerts
of one Fleetwatch incident, one per incident: their ``dedup_key`` is the incident's, so
PagerDuty folds every trigger of it into one alert ("Events API v2 … dedup_key: Deduplication
key for correlating triggers and resolves"), and a resolve is sent only when the last of its
alerts the channel was told about resolves (before that, a resolved alert is a trigger that
adds to the incident's log, never a resolve that would close it while others fire).

Fields from PagerDuty's "Send an Alert Event" reference: ``routing_key`` (the integration key,
``ChannelConfig.secret``), ``event_action``, ``dedup_key`` (≤255 characters; the same for the
trigger and resolve of one alert instance), ``payload.summary`` (≤1,024), ``source``,
``severity`` (critical, error, warning, info), ``timestamp``, ``component``, ``group``,
``class``, ``custom_details``, ``links``, ``client``, ``client_url``. Answers: 202 accepted,
400 invalid event (permanent), 429 throttled and 5xx retryable.
"""

from __future__ import annotations

import hashlib
import json
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

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_CHARS = 1024
DEDUP_KEY_CHARS = 255
SEVERITIES = {"critical": "critical", "error": "error", "warning": "warning", "info": "info"}
DEFAULT_SEVERITY = "warning"


def dedup_key(notice: AlertNotice) -> str:
    """``fleetwatch/incident/<id>`` for an alert of an incident; else
    ``fleetwatch/<fingerprint>/<alert_id>``: stable for one alert instance (its trigger and
    resolve), new when the same rule × entity fires again later. Longer than 255 characters
    → ``fleetwatch/sha256:<hex of the long key>``."""
    key = f"fleetwatch/{notice.fingerprint}/{notice.alert_id}"
    if notice.incident_id is not None:
        key = f"fleetwatch/incident/{notice.incident_id}"
    if len(key) <= DEDUP_KEY_CHARS:
        return key
    return "fleetwatch/sha256:" + hashlib.sha256(key.encode()).hexdigest()


def event(notice: AlertNotice, routing_key: str) -> dict[str, Any]:
    """The Events API v2 body for one notice."""
    others = notice.incident_firing or 0
    if notice.status == "resolved" and (notice.incident_id is None or others == 0):
        return {
            "routing_key": routing_key,
            "event_action": "resolve",
            "dedup_key": dedup_key(notice),
        }
    labels = notice.labels
    details: dict[str, Any] = {"labels": dict(sorted(labels.items()))}
    if notice.value is not None:
        details["value"] = notice.value
    if notice.annotations.get("description"):
        details["description"] = notice.annotations["description"]
    details["entity"] = common.entity_text(notice)
    if notice.incident_url:
        details["incident"] = notice.incident_url
        details["incident_alerts_firing"] = others + (notice.status == "firing")
    if notice.jobs_hit:
        details["jobs_hit"] = list(notice.jobs_hit)
    payload: dict[str, Any] = {
        "summary": common.truncate(
            f"{common.severity_word(notice)}: {notice.summary}", SUMMARY_CHARS
        ),
        "source": labels.get("hostname") or labels.get("instance") or "fleetwatch",
        "severity": SEVERITIES.get(notice.severity, DEFAULT_SEVERITY),
        "timestamp": common.rfc3339(notice.starts_at),
        "component": f"GPU {labels['gpu']}" if labels.get("gpu") else "node",
        "group": notice.team or labels.get("cluster") or "fleet",
        "class": notice.rule_name,
        "custom_details": details,
    }
    links = [{"href": notice.dashboard_url, "text": "Open in Fleetwatch"}]
    if notice.runbook_url:
        links.append({"href": notice.runbook_url, "text": "Runbook"})
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key(notice),
        "payload": payload,
        "links": links,
        "client": "Fleetwatch",
        "client_url": notice.dashboard_url,
    }


class PagerDutyKind(ChannelKind):
    """PagerDuty service integration of type "Events API v2"."""

    kind = "pagerduty"
    default_url = EVENTS_URL
    rate_limit = (2, 1.0)  # Events API v2: 120 events a minute per routing key

    def rate_key(self, config: ChannelConfig) -> str:
        """PagerDuty limits per integration (routing) key, not per URL."""
        return f"{config.url or EVENTS_URL}#{config.secret or ''}"

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """One POST per notice to ``config.url`` (empty → :data:`EVENTS_URL`), in order."""
        if not config.secret:
            raise ValueError("secret: the PagerDuty integration (routing) key is required")
        url = config.url or EVENTS_URL
        return [
            OutboundRequest(
                url=url,
                body=common.json_bytes(event(notice, config.secret)),
                headers={"Content-Type": "application/json"},
                covers=(index,),
            )
            for index, notice in enumerate(group.notices)
        ]

    def validate(self, config: ChannelConfig) -> None:
        """The routing key (``secret``) is required: 32 characters for Events API v2 keys."""
        if not config.secret or not config.secret.strip():
            raise ValueError("secret: the PagerDuty integration (routing) key is required")
        if len(config.secret) != 32 or not config.secret.isalnum():
            raise ValueError("secret: a PagerDuty routing key is 32 letters and digits")

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """202 ok; 400 permanent with PagerDuty's ``message``/``errors``; 429 and 5xx retryable.
        404 is permanent, not broken: the events URL is fixed, a 404 is not a deleted hook."""
        outcome = common.safe_interpret("PagerDuty", status_code, headers, b"")
        if outcome.ok:
            return outcome
        reason = common.safe_snippet(body)
        try:
            parsed = json.loads(body.decode("utf-8"))
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            parts = [str(parsed.get("message", ""))] + [str(e) for e in parsed.get("errors", [])]
            reason = common.safe_snippet("; ".join(p for p in parts if p).encode())
        detail = outcome.detail + (f": {reason}" if reason else "")
        return Outcome(
            ok=False,
            detail=detail,
            retryable=outcome.retryable,
            retry_after_s=outcome.retry_after_s,
            broken=False,
        )
