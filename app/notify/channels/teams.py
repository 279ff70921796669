"""Microsoft Teams Workflows webhook ("Post to a channel when a webhook request is received").

The body is a ``message`` whose ``attachments[0]`` is an Adaptive Card 1.4
(``application/vnd.microsoft.card.adaptive``): per notice a TextBlock title, a FactSet
(entity, value, time, labels), the description and an ActionSet of ``Action.OpenUrl``
(Runbook, Acknowledge, Open in Fleetwatch). Teams refuses payloads over about 28 KB
("Message size limits" in the Teams docs), so a group is split into several cards of at most
:data:`MAX_PAYLOAD_BYTES`; a notice too big alone is shrunk (labels and description cut).
TextBlock markdown is escaped with backslashes, and ``{{`` (Adaptive Card date/time functions)
is broken up.

Teams often answers 200/202 even when delivery failed, with the error in the body (JSON
``{"error": …}`` or text like "Microsoft Teams endpoint returned HTTP error 413"):
:meth:`TeamsKind.interpret` reads the body as well as the status.
"""

from __future__ import annotations

import json
import re
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
    retry_after_s,
)

MAX_PAYLOAD_BYTES = 28_000
CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
# (title, description, fact value, label facts) character caps per shrink level.
_LEVELS = ((300, 2000, 300, 30), (200, 500, 100, 10), (150, 200, 60, 0))
_COLOURS = {"critical": "Attention", "warning": "Warning", "info": "Accent"}
_MARKDOWN_SPECIALS = "\\*_[]`~"
_ERROR_MARKERS = ("webhook message delivery failed", "endpoint returned http error")
_HTTP_ERROR = re.compile(r"http error (\d{3})", re.IGNORECASE)


def escape(text: str) -> str:
    """Backslash-escape the markdown a TextBlock understands and defuse ``{{…}}`` functions."""
    return common.escape_markdown(text, _MARKDOWN_SPECIALS).replace("{{", "{\u200b{")


def _text(text: str, limit: int) -> str:
    return common.truncate_escaped(escape(text), limit)


def notice_elements(notice: AlertNotice, level: int = 0) -> list[dict[str, Any]]:
    """The card elements for one notice at shrink ``level`` (0: full, 2: smallest)."""
    title_cap, description_cap, fact_cap, label_count = _LEVELS[level]
    colour = "Good" if notice.status == "resolved" else _COLOURS.get(notice.severity, "Default")
    title = f"{common.severity_icon(notice)} {common.severity_word(notice)}: {notice.summary}"
    facts = [{"title": "Entity", "value": _text(common.entity_text(notice), fact_cap)}]
    value = common.value_text(notice.value)
    if value is not None:
        facts.append({"title": "Value", "value": value})
    if notice.status == "resolved" and notice.ends_at is not None:
        facts.append({"title": "Resolved at", "value": common.rfc3339(notice.ends_at)})
    else:
        facts.append({"title": "Since", "value": common.rfc3339(notice.starts_at)})
    if notice.jobs_hit:
        facts.append({"title": "Jobs hit", "value": _text("; ".join(notice.jobs_hit), fact_cap)})
    names = sorted(notice.labels)
    for name in names[:label_count]:
        facts.append({"title": _text(name, 60), "value": _text(notice.labels[name], fact_cap)})
    if len(names) > label_count:
        facts.append({"title": "Labels", "value": f"{len(names) - label_count} more not shown"})
    elements: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": _text(title, title_cap),
            "weight": "Bolder",
            "size": "Medium",
            "color": colour,
            "wrap": True,
            "separator": True,
        },
        {"type": "FactSet", "facts": facts},
    ]
    description = notice.annotations.get("description")
    if description:
        elements.append(
            {"type": "TextBlock", "text": _text(description, description_cap), "wrap": True}
        )
    actions = [
        {"type": "Action.OpenUrl", "title": label, "url": url}
        for label, url in common.links(notice)
    ]
    elements.append({"type": "ActionSet", "actions": actions})
    return elements


def payload(
    group: NoticeGroup, elements: list[dict[str, Any]], *, part: int, parts: int
) -> dict[str, Any]:
    """The Workflows webhook body: one Adaptive Card holding ``elements``."""
    heading = common.first_line(
        [
            "Fleetwatch test message" if group.is_test else "Fleetwatch",
            group.receiver,
            f"part {part}/{parts}" if parts > 1 else "",
        ]
    )
    body = [{"type": "TextBlock", "text": _text(heading, 300), "isSubtle": True, "wrap": True}]
    card = {
        "$schema": CARD_SCHEMA,
        "type": "AdaptiveCard",
        "version": "1.4",
        "msteams": {"width": "Full"},
        "body": body + elements,
    }
    return {
        "type": "message",
        "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": card}],
    }


def _size(group: NoticeGroup, chunk: list[list[dict[str, Any]]], parts: int) -> int:
    elements = [e for notice in chunk for e in notice]
    return len(common.json_bytes(payload(group, elements, part=parts, parts=parts)))


class TeamsKind(ChannelKind):
    """Microsoft Teams via a Workflows (Power Automate) webhook URL."""

    kind = "teams"
    rate_limit = (4, 1.0)  # "Rate limiting for connectors": 4 requests a second per webhook

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """Cards of at most :data:`MAX_PAYLOAD_BYTES` bytes each, notices in group order."""
        rendered: list[list[dict[str, Any]]] = []
        for notice in group.notices:
            for level in range(len(_LEVELS)):
                elements = notice_elements(notice, level)
                if _size(group, [elements], 999) <= MAX_PAYLOAD_BYTES:
                    break
            if level:
                common.note_cut(f"alert {notice.alert_id} shortened (level {level}) to fit")
            rendered.append(elements)
        chunks = common.pack(rendered, fits=lambda c: _size(group, c, 999) <= MAX_PAYLOAD_BYTES)
        starts = [sum(len(c) for c in chunks[:i]) for i in range(len(chunks))]
        return [
            OutboundRequest(
                url=config.url,
                body=common.json_bytes(
                    payload(
                        group,
                        [e for notice in chunk for e in notice],
                        part=part,
                        parts=len(chunks),
                    )
                ),
                headers={"Content-Type": "application/json; charset=utf-8"},
                covers=tuple(range(starts[part - 1], starts[part - 1] + len(chunk))),
            )
            for part, chunk in enumerate(chunks, start=1)
        ]

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """2xx is ok only when the body carries no error; an error inside a 2xx body is read
        like the HTTP status it names (413 permanent, 429/5xx retryable)."""
        if not 200 <= status_code < 300:
            return common.safe_interpret("Teams", status_code, headers, body)
        error = _body_error(body)
        if error is None:
            return Outcome(ok=True, detail=f"Teams: HTTP {status_code}")
        inner_code, text = error
        detail = f"Teams: HTTP {status_code} with error: {common.safe_snippet(text.encode())}"
        retryable = inner_code is not None and (inner_code in (408, 429) or inner_code >= 500)
        if "throttl" in text.lower():
            retryable = True
        return Outcome(
            ok=False,
            detail=detail,
            retryable=retryable,
            retry_after_s=retry_after_s(headers) if retryable else None,
            broken=inner_code in (404, 410),
        )


def _body_error(body: bytes) -> tuple[int | None, str] | None:
    """``(HTTP code named in the error or None, error text)`` when a 2xx body reports a
    failure, else ``None``."""
    text = body.decode("utf-8", "replace").strip()
    if not text or text == "1":
        return None
    error_text: str | None = None
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("error"):
        error = parsed["error"]
        if isinstance(error, dict):
            error_text = str(error.get("message") or error.get("code") or error)
            code = str(error.get("code", ""))
            if code.isdigit():
                error_text = f"HTTP error {code}: {error_text}"
        else:
            error_text = str(error)
    elif any(marker in text.lower() for marker in _ERROR_MARKERS):
        error_text = text
    if error_text is None:
        return None
    match = _HTTP_ERROR.search(error_text)
    return (int(match.group(1)) if match else None), error_text
