"""The words of an incident's chat message, shared by the kinds that edit one (Slack's Web API,
Discord): its title, its facts, one line per alert and the lines of a change. Pure functions of
the :class:`~app.notify.channels.base.IncidentCard` and the notices (no clock: times come in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.notify.channels import common
from app.notify.channels.base import AlertNotice, IncidentCard

#: Longest fact value and alert line (characters, before escaping): one long summary or
#: action text never pushes the other facts or alerts out of the message.
FACT_CHARS = 300
ALERT_LINE_CHARS = 300
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
    pairs = [
        ("GPUs", gpus),
        ("Xids", xids),
        ("Opened", common.rfc3339(card.opened_at)),
        ("Last fault", common.rfc3339(card.last_event_at)),
        ("Status", status),
        ("Suggested action", card.action_text or "none"),
    ]
    return [(name, common.truncate(value, FACT_CHARS)) for name, value in pairs]


def alert_line(notice: AlertNotice) -> str:
    """``🔴 Critical: Xid 79 on node-a GPU 1 (gpu-lost) since 2026-…Z`` or ``✅ Resolved: …
    at …``."""
    head = f"{common.severity_icon(notice)} {common.severity_word(notice)}: "
    if notice.status == "resolved" and notice.ends_at is not None:
        tail = f" ({notice.rule_name}) at {common.rfc3339(notice.ends_at)}"
    else:
        tail = f" ({notice.rule_name}) since {common.rfc3339(notice.starts_at)}"
    room = max(1, ALERT_LINE_CHARS - len(head) - len(tail))
    return head + common.truncate(notice.summary, room) + tail


def fit_lines(
    lines: Sequence[str],
    total: int,
    limit: int,
    size: Callable[[str], int] = len,
    *,
    noun: str = "alerts",
) -> list[str]:
    """The first whole ``lines`` (already rendered: escaped, links) that fit in ``limit``
    (measured by ``size``, joined by newlines) with, when fewer than ``total`` are shown, a
    last line ``and N more <noun>``. A line is never cut: a cut link or escape would show as
    raw markup."""

    def more(shown: int) -> str:
        return f"and {total - shown} more {noun}"

    kept: list[str] = []
    used = 0
    for line in lines:
        need = used + size(line) + (1 if kept else 0)
        tail = 0 if len(kept) + 1 == total else size(more(len(kept) + 1)) + 1
        if need + tail > limit:
            break
        kept.append(line)
        used = need
    if len(kept) < total:
        kept.append(more(len(kept)))
    return kept
