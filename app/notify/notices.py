"""Delivery rows → the notices and groups channel kinds build messages from (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.notify.ack_links import AckSigner
from app.notify.channels.base import AlertNotice, NoticeGroup, NoticeStatus

TEST_RULE = "fleetwatch-test"


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def notice_of(
    payload: dict[str, Any], *, external_url: str, signer: AckSigner | None
) -> AlertNotice:
    """The :class:`AlertNotice` of a delivery row's ``payload`` (from
    :func:`app.notify.outbox.payload_of`), with absolute links: the alert's page, the node or
    GPU page, the runbook, and for firing notices a fresh signed ack link; ``jobs_hit`` (set
    by the worker at send time) becomes the notice's ``jobs_hit`` and the annotation of that
    name."""
    base = external_url.rstrip("/")
    labels = dict(payload.get("labels") or {})
    alert_id = int(payload["alert_id"])
    hostname = labels.get("hostname")
    entity_url = None
    if hostname:
        gpu = labels.get("gpu_index")
        entity_url = f"{base}/nodes/{hostname}" + (f"/gpus/{gpu}" if gpu else "")
    runbook_url = payload.get("runbook_url")
    if not runbook_url and payload.get("runbook"):
        runbook_url = f"{base}/runbooks/{payload['runbook']}"
    status: NoticeStatus = "resolved" if payload["status"] == "resolved" else "firing"
    jobs = payload.get("jobs_hit")
    jobs_hit = tuple(str(j) for j in jobs) if isinstance(jobs, list) else ()
    annotations = {
        "summary": str(payload.get("summary") or ""),
        "description": str(payload.get("description") or ""),
    }
    if jobs_hit:
        annotations["jobs_hit"] = "; ".join(jobs_hit)
    ack_url = None
    if status == "firing" and signer is not None and alert_id > 0:
        ack_url = signer.url(base, alert_id=alert_id, fingerprint=payload["fingerprint"])
    incident_id = _incident(payload.get("incident_id"))
    starts_at = _time(payload.get("starts_at"))
    assert starts_at is not None, "a notice payload always has starts_at"
    return AlertNotice(
        alert_id=alert_id,
        fingerprint=str(payload["fingerprint"]),
        rule_name=str(payload["rule_name"]),
        status=status,
        severity=str(payload["severity"]),
        team=payload.get("team"),
        labels=labels,
        annotations=annotations,
        value=payload.get("value"),
        starts_at=starts_at,
        ends_at=_time(payload.get("ends_at")),
        dashboard_url=f"{base}/alerts/{alert_id}" if alert_id > 0 else f"{base}/alerts",
        entity_url=entity_url,
        ack_url=ack_url,
        runbook_url=runbook_url,
        jobs_hit=jobs_hit,
        incident_id=incident_id,
        incident_url=f"{base}/incidents/{incident_id}" if incident_id is not None else None,
        incident_firing=_incident(payload.get("incident_firing")),
    )


def _incident(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def group_of(
    payloads: Sequence[dict[str, Any]],
    *,
    group_key: str,
    receiver: str,
    external_url: str,
    signer: AckSigner | None,
    is_test: bool = False,
    sent_at: datetime | None = None,
) -> NoticeGroup:
    """One message's group: the rows' notices in order; group labels from the first row;
    ``sent_at`` is the send time (what signatures carry)."""
    notices = tuple(notice_of(p, external_url=external_url, signer=signer) for p in payloads)
    return NoticeGroup(
        group_key=group_key,
        receiver=receiver,
        notices=notices,
        external_url=external_url,
        group_labels=dict(payloads[0].get("group_labels") or {}) if payloads else {},
        is_test=is_test,
        sent_at=sent_at,
    )


def test_payload(*, channel_name: str, team: str | None, now: datetime) -> dict[str, Any]:
    """The payload of the "send test message" notice (alert id 0: no alert, no ack link)."""
    return {
        "alert_id": 0,
        "fingerprint": "test",
        "rule_name": TEST_RULE,
        "status": "firing",
        "severity": "info",
        "team": team,
        "labels": {"alertname": TEST_RULE, "severity": "info", "channel": channel_name},
        "summary": f"Test message from Fleetwatch to channel {channel_name}",
        "description": "If you can read this, the channel works. No action is needed.",
        "value": None,
        "starts_at": now.isoformat(),
        "ends_at": None,
        "runbook_url": None,
        "runbook": None,
        "group_labels": {"alertname": TEST_RULE},
    }
