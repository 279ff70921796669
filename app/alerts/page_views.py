"""What the alert pages show: one row per alert (from an instance, or from a ``resolved``
``alert_event`` for the history), the entity's name and link, the runbook link, and the
``/alerts`` URL state (tab, filters, history range, text search)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.inhibition import Inhibitor, inhibitors
from app.alerts.models import AlertEvent, AlertInstance, AlertRule
from app.alerts.spec import SEVERITIES
from app.api_params import MAX_ID
from app.errors import BadRequest

TABS = ("active", "firing", "pending", "resolved")
#: History ranges of the "resolved" tab: name → seconds.
HISTORY_RANGES = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}


@dataclass(frozen=True)
class AlertRow:
    """One line of ``/alerts``: the instance ``id`` (detail link), its rule, labels, value,
    ``since`` (``active_since`` or ``fired_at``) and ``until`` (resolution time, history only)."""

    id: int
    rule: str
    severity: str
    owner_team: str
    state: str
    labels: dict[str, Any]
    value: float | None
    summary: str
    since: datetime | None
    until: datetime | None
    silenced: bool
    acked: bool
    runbook: tuple[str, str] | None
    inhibited_by: Inhibitor | None = None

    @property
    def entity(self) -> tuple[str, str | None]:
        """(name, link) of the entity: see :func:`entity_of`."""
        return entity_of(self.labels)


def parse_id(raw: str, name: str) -> int:
    """A numeric id from a URL path segment.

    Raises:
        BadRequest: not an integer in 1 .. :data:`~app.api_params.MAX_ID` (the ``INTEGER`` id
            columns' range on Postgres), naming ``name``.
    """
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18 or not 1 <= int(raw) <= MAX_ID:
        raise BadRequest(f"{name}: expected an integer 1..{MAX_ID}, got {raw[:40]!r}")
    return int(raw)


def entity_of(labels: dict[str, Any]) -> tuple[str, str | None]:
    """The entity an alert is about, from its labels, and its page: a GPU
    (``hostname`` + ``gpu_uuid``) links to ``/nodes/{h}/gpus/{uuid}``, a node (``hostname``)
    to ``/nodes/{h}``; disks, mounts and NIC ports add ``device``/``mountpoint``/``port`` to
    the name and link to their node."""
    host = str(labels.get("hostname") or "")
    parts = [host] if host else []
    if labels.get("gpu_index") is not None:
        parts.append(f"GPU {labels['gpu_index']}")
    parts += [str(labels[k]) for k in ("device", "port", "mountpoint") if labels.get(k)]
    name = " ".join(parts) or "fleet"
    if not host:
        return name, None
    node = f"/nodes/{quote(host, safe='')}"
    if labels.get("gpu_uuid"):
        return name, f"{node}/gpus/{quote(str(labels['gpu_uuid']), safe='')}"
    return name, node


def runbook_link(spec: dict[str, Any], alert_id: int | None = None) -> tuple[str, str] | None:
    """(text, href) of a rule's runbook: the in-app one first (``runbook`` →
    ``/runbooks/{name}?alert={id}``, which fills in that alert's node, GPU and labels), else
    ``runbook_url``; None when it has neither."""
    if spec.get("runbook"):
        href = f"/runbooks/{quote(spec['runbook'], safe='')}"
        return spec["runbook"], href + (f"?alert={alert_id}" if alert_id is not None else "")
    if spec.get("runbook_url"):
        return "runbook", spec["runbook_url"]
    return None


def with_inhibitors(session: Session, rows: list[AlertRow]) -> list[AlertRow]:
    """``rows`` with what inhibits each firing one now (:mod:`app.alerts.inhibition`)."""
    found = inhibitors(session, {r.id: r.labels for r in rows if r.state == "firing"})
    return [replace(r, inhibited_by=found[r.id]) if r.id in found else r for r in rows]


def row_of(inst: AlertInstance, rule: AlertRule) -> AlertRow:
    """A row from an instance and its rule (what the active tabs show)."""
    return AlertRow(
        inst.id,
        rule.name,
        rule.severity,
        rule.owner_team or "",
        inst.state,
        dict(inst.labels),
        inst.value,
        inst.summary,
        inst.active_since or inst.fired_at,
        inst.resolved_at if inst.state == "resolved" else None,
        inst.silenced,
        inst.acked,
        runbook_link(rule.spec, inst.id),
    )


def resolved_history(session: Session, *, since: datetime, limit: int = 1000) -> list[AlertRow]:
    """Every resolution (``alert_event`` to ``resolved``) at or after ``since``, newest first;
    ``since`` of a row is when that firing began (the instance's ``fired_at`` when it fired
    before this resolution, else unknown)."""
    rows = session.execute(
        select(AlertEvent, AlertRule, AlertInstance.fired_at)
        .join(AlertRule, AlertRule.id == AlertEvent.rule_id)
        .join(AlertInstance, AlertInstance.id == AlertEvent.instance_id)
        .where(AlertEvent.to_state == "resolved", AlertEvent.at >= since)
        .order_by(AlertEvent.at.desc(), AlertEvent.id.desc())
        .limit(limit)
    )
    out = []
    for event, rule, fired_at in rows:
        began = fired_at if fired_at is not None and fired_at <= event.at else None
        out.append(
            AlertRow(
                event.instance_id,
                rule.name,
                event.severity,
                rule.owner_team or "",
                "resolved",
                dict(event.labels),
                event.value,
                event.summary,
                began,
                event.at,
                event.silenced,
                event.acked,
                runbook_link(rule.spec, event.instance_id),
            )
        )
    return out


@dataclass(frozen=True)
class AlertFilters:
    """``/alerts`` URL state: ``tab`` (active, firing, pending, resolved), ``team``,
    ``severity``, ``rule``, free text ``q`` (rule, summary, any label value) and ``range`` of
    the resolved history."""

    tab: str = "active"
    team: str = ""
    severity: str = ""
    rule: str = ""
    q: str = ""
    range: str = "24h"

    @classmethod
    def parse(cls, raw: dict[str, str | None]) -> AlertFilters:
        """From query parameters.

        Raises:
            BadRequest: unknown ``tab``, ``severity`` or ``range``, naming the parameter.
        """
        tab = raw.get("tab") or "active"
        if tab not in TABS:
            raise BadRequest(f"tab: one of {', '.join(TABS)}, got {tab!r}")
        severity = raw.get("severity") or ""
        if severity and severity not in SEVERITIES:
            raise BadRequest(f"severity: one of {', '.join(SEVERITIES)}, got {severity!r}")
        range_ = raw.get("range") or "24h"
        if range_ not in HISTORY_RANGES:
            raise BadRequest(f"range: one of {', '.join(HISTORY_RANGES)}, got {range_!r}")
        return cls(
            tab=tab,
            team=(raw.get("team") or "").strip()[:128],
            severity=severity,
            rule=(raw.get("rule") or "").strip()[:128],
            q=(raw.get("q") or "").strip()[:256],
            range=range_,
        )

    @property
    def filtered(self) -> bool:
        """Whether any filter narrows the list."""
        return bool(self.team or self.severity or self.rule or self.q)

    def history_start(self, now: datetime) -> datetime:
        """The start of the resolved history range."""
        return now - timedelta(seconds=HISTORY_RANGES[self.range])

    def query(self, tz: str = "", **changes: Any) -> str:
        """The query string of this state with ``changes`` applied (defaults left out), plus
        ``tz`` (``tz_query()``) when given."""
        state = replace(self, **changes)
        params = [
            (k, v)
            for k, v in (
                ("tab", state.tab if state.tab != "active" else ""),
                ("team", state.team),
                ("severity", state.severity),
                ("rule", state.rule),
                ("q", state.q),
                ("range", state.range if state.tab == "resolved" and state.range != "24h" else ""),
            )
            if v
        ]
        text = urlencode(params)
        text = "&".join(p for p in (text, tz) if p)
        return "?" + text if text else ""

    def keep(self, row: AlertRow) -> bool:
        """Whether ``row`` passes the team, severity, rule and text filters."""
        if self.team and row.owner_team != self.team:
            return False
        if self.severity and row.severity != self.severity:
            return False
        if self.rule and row.rule != self.rule:
            return False
        if self.q:
            needle = self.q.casefold()
            hay = [row.rule, row.summary, *(str(v) for v in row.labels.values())]
            return any(needle in h.casefold() for h in hay)
        return True
