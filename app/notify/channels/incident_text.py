"""The words of an incident's chat message, shared by the kinds that edit one (Slack's Web API,
Discord): its title, its facts, one line per alert and the lines of a change. Pure functions of
the :class:`~app.notify.channels.base.IncidentCard` and the notices (no clock: times come in).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.notify.channels import common
from app.notify.channels.base import AlertNotice, IncidentCard

_STATE_WORDS = {"unhealthy": "Unhealthy", "degraded": "Degraded"}
_STATE_ICONS = {"unhealthy": "🔴", "degraded": "🟠"}


def firing(notices: Sequence[AlertNotice]) -> list[AlertNotice]:
    """The notices that still fire, in order."""
    return [n for n in notices if n.status == "firing"]


def title(card: IncidentCard, notices: Sequence[AlertNotice]) -> str:
    """``🔴 Incident 12 on node-a: Unhealthy, job-fatal · 2 alerts firing`` (``✅ … closed``
    once closed with no alert firing; ``TEST`` first for a self-test)."""
    state = _STATE_WORDS.get(card.state, card.state.capitalize() or "Fault")
    live = len(firing(notices))
    icon = _STATE_ICONS.get(card.state, "⚪")
    if not card.open and not live:
        icon = common.RESOLVED_ICON
    head = f"{icon} {'TEST ' if card.test else ''}Incident {card.id} on {card.hostname}: {state}"
    if card.job_fatal:
        head += ", job-fatal"
    parts = [head]
    if live:
        parts.append(f"{live} alert{'s' if live != 1 else ''} firing")
    elif notices:
        parts.append("all alerts resolved")
    parts.append("open" if card.open else "closed")
    return " · ".join(parts)


def facts(card: IncidentCard) -> list[tuple[str, str]]:
    """(name, value) pairs: GPUs, Xids, span, status and the suggested action."""
    gpus = ", ".join(str(i) for i in card.gpu_indexes) or "node-level"
    xids = ", ".join(str(x) for x in card.xids) or "none"
    if card.open:
        status = f"open: closes at {common.rfc3339(card.closes_at)} without a new fault"
    else:
        status = f"closed at {common.rfc3339(card.closes_at)}"
    return [
        ("GPUs", gpus),
        ("Xids", xids),
        ("Opened", common.rfc3339(card.opened_at)),
        ("Last fault", common.rfc3339(card.last_event_at)),
        ("Status", status),
        ("Suggested action", card.action_text or "none"),
    ]


def alert_line(notice: AlertNotice) -> str:
    """``🔴 Critical: Xid 79 on node-a GPU 1 (gpu-lost) since 2026-…Z`` or ``✅ Resolved: …
    at …``."""
    line = f"{common.severity_icon(notice)} {common.severity_word(notice)}: {notice.summary}"
    line += f" ({notice.rule_name})"
    if notice.status == "resolved" and notice.ends_at is not None:
        return line + f" at {common.rfc3339(notice.ends_at)}"
    return line + f" since {common.rfc3339(notice.starts_at)}"
