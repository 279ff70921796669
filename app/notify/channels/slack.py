"""Slack incoming webhook: one Block Kit message per up to 16 notices.

Each notice is three blocks: a ``header`` (severity icon + word + summary), a ``section`` in
mrkdwn (entity, value, labels, description) and an ``actions`` block (Runbook, Acknowledge,
Open in Fleetwatch buttons). Limits from Slack's Block Kit reference: 50 blocks per message,
header text 150 characters, section text 3,000, button text 75, button URL 3,000, ``text``
(the notification fallback) 40,000 — kept short here. Text is escaped for mrkdwn (``&``, ``<``,
``>`` per "Formatting text for app surfaces"), so labels cannot make links or ``<!here>``
mentions. Answers: 200 ``ok``; 400 ``invalid_payload``/``no_text``/``invalid_blocks``; 403
``action_prohibited``; 404 ``no_service``/``channel_not_found`` and 410 ``channel_is_archived``
(the webhook is gone: broken); 429 ``rate_limited`` with ``Retry-After``.
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

MAX_BLOCKS = 50
HEADER_CHARS = 150
SECTION_CHARS = 3000
BUTTON_TEXT_CHARS = 75
BUTTON_URL_CHARS = 3000
FALLBACK_CHARS = 3000
LABEL_CHARS = 200  # per name=value pair, so one long label cannot hide the description
BLOCKS_PER_NOTICE = 3
# One context block opens every message (group and part), then three blocks per notice.
NOTICES_PER_MESSAGE = (MAX_BLOCKS - 1) // BLOCKS_PER_NOTICE


def escape(text: str) -> str:
    """Slack mrkdwn escaping: ``&`` → ``&amp;``, ``<`` → ``&lt;``, ``>`` → ``&gt;``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def link(url: str, label: str) -> str:
    """A mrkdwn link ``<url|label>``; ``|`` in the URL is percent-encoded."""
    return f"<{escape(url).replace('|', '%7C')}|{escape(label)}>"


def _code(text: str) -> str:
    """Inline code for a label; backticks inside become ``'`` so the span cannot be closed."""
    return "`" + escape(text.replace("`", "'")) + "`"


def _header(notice: AlertNotice) -> dict[str, Any]:
    text = f"{common.severity_icon(notice)} {common.severity_word(notice)}: {notice.summary}"
    return {
        "type": "header",
        "text": {"type": "plain_text", "text": common.truncate(text, HEADER_CHARS), "emoji": True},
    }


def _section(notice: AlertNotice) -> dict[str, Any]:
    entity = common.entity_text(notice)
    lines = [
        "*Entity:* " + (link(notice.entity_url, entity) if notice.entity_url else escape(entity))
    ]
    value = common.value_text(notice.value)
    if value is not None:
        lines.append(f"*Value:* {value}")
    if notice.status == "resolved" and notice.ends_at is not None:
        lines.append(f"*Resolved at:* {common.rfc3339(notice.ends_at)}")
    else:
        lines.append(f"*Since:* {common.rfc3339(notice.starts_at)}")
    if notice.jobs_hit:
        lines.append("*Jobs hit:* " + escape("; ".join(notice.jobs_hit)))
    pairs = common.labels_text(notice.labels)
    if pairs:
        lines.append("*Labels:* " + " ".join(_code(common.truncate(p, LABEL_CHARS)) for p in pairs))
    description = notice.annotations.get("description")
    if description:
        lines.append(escape(description))
    text = "\n".join(lines)
    # Cutting escaped text may split an entity such as "&amp;"; drop the broken tail.
    cut = common.truncate(text, SECTION_CHARS)
    if cut != text:
        head = cut[:-1]
        amp = head.rfind("&")
        if amp != -1 and ";" not in head[amp:]:
            head = head[:amp]
        cut = head + common.ELLIPSIS
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut}}


def _actions(notice: AlertNotice, index: int) -> dict[str, Any]:
    ids = {"Runbook": "runbook", "Acknowledge": "ack", "Open in Fleetwatch": "open"}
    elements: list[dict[str, Any]] = []
    for label, url in common.links(notice):
        if len(url) > BUTTON_URL_CHARS:  # Slack rejects the whole message; the text still links.
            continue
        button: dict[str, Any] = {
            "type": "button",
            "text": {"type": "plain_text", "text": common.truncate(label, BUTTON_TEXT_CHARS)},
            "url": url,
            "action_id": f"{ids[label]}-{index}",
        }
        if label == "Acknowledge":
            button["style"] = "primary"
        elements.append(button)
    return {"type": "actions", "elements": elements}


def _fallback(notices: list[AlertNotice]) -> str:
    first = notices[0]
    text = f"{common.severity_icon(first)} {common.severity_word(first)}: {first.summary}"
    if len(notices) > 1:
        text += f" (+{len(notices) - 1} more)"
    return escape(common.truncate(text, FALLBACK_CHARS))


def message(
    group: NoticeGroup, notices: list[AlertNotice], *, start: int, part: int, parts: int
) -> dict[str, Any]:
    """The Slack message for ``notices`` (at most :data:`NOTICES_PER_MESSAGE`); ``start`` is the
    first notice's index in the group (keeps ``action_id`` unique), ``part``/``parts`` count
    the messages of a split group."""
    context = common.first_line(
        [
            "Fleetwatch test message" if group.is_test else "Fleetwatch",
            group.receiver,
            f"{len(group.notices)} alerts" if len(group.notices) > 1 else "",
            f"part {part}/{parts}" if parts > 1 else "",
        ]
    )
    blocks: list[dict[str, Any]] = [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": escape(context)}]}
    ]
    for offset, notice in enumerate(notices):
        blocks += [_header(notice), _section(notice), _actions(notice, start + offset)]
    return {"text": _fallback(notices), "blocks": blocks}


class SlackKind(ChannelKind):
    """Slack incoming webhook (``https://hooks.slack.com/services/…``)."""

    kind = "slack"
    rate_limit = (1, 1.0)  # "Rate limits": incoming webhooks, about one message a second

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """One JSON POST per :data:`NOTICES_PER_MESSAGE` notices, in group order."""
        chunks = common.pack(group.notices, fits=lambda _: True, max_items=NOTICES_PER_MESSAGE)
        requests: list[OutboundRequest] = []
        start = 0
        for part, chunk in enumerate(chunks, start=1):
            body = message(group, chunk, start=start, part=part, parts=len(chunks))
            start += len(chunk)
            requests.append(
                OutboundRequest(
                    url=config.url,
                    body=common.json_bytes(body),
                    headers={"Content-Type": "application/json; charset=utf-8"},
                    covers=tuple(range(start - len(chunk), start)),
                )
            )
        return requests

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """Slack's answers (see the module docstring); ``detail`` carries Slack's error code."""
        return common.safe_interpret("Slack", status_code, headers, body)
