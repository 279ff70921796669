"""What a runbook is filled in with: :class:`RunbookContext`, built from an alert instance.

Template names (``{{ … }}`` in a runbook): ``node.hostname``, ``node.labels.<name>``,
``gpu.index`` / ``gpu.uuid`` / ``gpu.model``, ``device``, ``mountpoint``, ``port``,
``labels.<name>`` (every instance label), ``value``, ``threshold``, ``alert.id`` / ``.rule`` /
``.state`` /
``.severity`` / ``.summary`` / ``.description`` / ``.fired_at`` / ``.active_since``, and
``links.node`` / ``.gpu`` / ``.alert`` / ``.alerts`` / ``.storage`` (paths of this server's pages).
A name the alert has no value for is left out, so the runbook shows it as missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from sqlalchemy.orm import Session

from app.alerts import service as alert_service
from app.alerts.models import AlertInstance, AlertRule

# Instance labels that describe the alert or the entity rather than the node
# (app.alerts.evaluator.instance_labels, app.alerts.context.gpu_labels, app.series.rule_targets).
ALERT_LABELS = frozenset(
    {"alertname", "severity", "owner_team", "hostname", "gpu_index", "gpu_uuid", "gpu_model"}
)
ENTITY_LABELS = frozenset({"device", "mountpoint", "port"})


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class RunbookContext:
    """One alert's values for a runbook. ``labels``: the instance labels as stored;
    ``value``: the rule's value for the entity (unit of the rule's metric, e.g. °C for
    ``temp_c``, seconds for ``avg_wait_s``, a count for Xid events); ``threshold``: the rule
    condition's threshold, if it has one."""

    labels: dict[str, str] = field(default_factory=dict)
    value: float | None = None
    threshold: float | None = None
    alert: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_alert(cls, instance: AlertInstance, rule: AlertRule) -> RunbookContext:
        """The context of ``instance`` of ``rule`` (rows of ``alert_instance``/``alert_rule``,
        as :func:`app.alerts.service.get_alert` returns them)."""
        condition = (rule.spec or {}).get("condition") or {}
        threshold = condition.get("threshold")
        return cls(
            labels={str(k): str(v) for k, v in (instance.labels or {}).items()},
            value=instance.value,
            threshold=float(threshold) if isinstance(threshold, int | float) else None,
            alert={
                "id": instance.id,
                "rule": rule.name,
                "state": instance.state,
                "severity": rule.severity,
                "owner_team": rule.owner_team,
                "summary": instance.summary,
                "description": instance.description,
                "fired_at": _iso(instance.fired_at),
                "active_since": _iso(instance.active_since),
            },
        )

    def template_vars(self) -> dict[str, Any]:
        """The names a runbook template sees (module docstring); absent values left out."""
        labels = self.labels
        out: dict[str, Any] = {"labels": dict(labels)}
        links: dict[str, str] = {"alerts": "/alerts"}
        alert = {k: v for k, v in self.alert.items() if v is not None and v != ""}
        if alert:
            out["alert"] = alert
            if "id" in alert:
                links["alert"] = f"/alerts/{alert['id']}"
        hostname = labels.get("hostname")
        if hostname:
            node_labels = {k: v for k, v in labels.items() if k not in ALERT_LABELS | ENTITY_LABELS}
            out["node"] = {"hostname": hostname, "labels": node_labels}
            links["node"] = f"/nodes/{quote(hostname, safe='')}"
            links["storage"] = "/storage?" + urlencode({"q": hostname})
        if "gpu_index" in labels:
            gpu = {"index": labels["gpu_index"]}
            if labels.get("gpu_uuid"):
                gpu["uuid"] = labels["gpu_uuid"]
            if labels.get("gpu_model"):
                gpu["model"] = labels["gpu_model"]
            out["gpu"] = gpu
            if hostname:
                key = gpu.get("uuid", gpu["index"])
                links["gpu"] = f"{links['node']}/gpus/{quote(key, safe='')}"
        for name in ENTITY_LABELS:
            if labels.get(name):
                out[name] = labels[name]
        if self.value is not None:
            out["value"] = self.value
        if self.threshold is not None:
            out["threshold"] = self.threshold
        out["links"] = links
        return out


def context_for_alert(session: Session, *, alert_id: int) -> RunbookContext:
    """The context of alert instance ``alert_id``.

    Raises:
        NotFound: no such instance.
    """
    instance, rule = alert_service.get_alert(session, alert_id=alert_id)
    return RunbookContext.from_alert(instance, rule)
