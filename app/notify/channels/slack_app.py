"""Slack app (Web API, bot token): one message per incident, edited in place, with a thread of
its changes; other notices as :mod:`app.notify.channels.slack` builds them.

Methods (Slack API reference, api.slack.com/methods): ``chat.postMessage`` (POST
``https://slack.com/api/chat.postMessage``, JSON ``channel``, ``text``, ``blocks``, and
``thread_ts`` to reply in a message's thread) answers ``{"ok": true, "channel": "C…", "ts":
"1503435956.000247", "message": {…}}``; ``chat.update`` (``channel``, ``ts``, ``text``,
``blocks``) edits that message and answers the same shape. The token goes in the
``Authorization: Bearer xoxb-…`` header. ``chat.update`` takes a channel **ID** (``C…``),
never a name, so ``options.channel`` must be one. Errors come as HTTP 200 with ``{"ok": false,
"error": "…"}``: ``message_not_found``, ``cant_update_message`` and ``edit_window_closed``
mean the message cannot be edited (the change is posted as a new message instead);
``channel_not_found``, ``not_in_channel``, ``is_archived``, ``invalid_auth``,
``account_inactive`` and ``token_revoked`` mean the channel is broken; ``ratelimited`` (and
HTTP 429 with ``Retry-After``) is retried. Rate limit: chat.postMessage about one message a
second per channel ("Rate limits", special tier); chat.update is Tier 3.

The incident's message: a header (state, job-fatal, alerts firing, open or closed), its facts
(GPUs, Xids, times, suggested action), one line per alert of the incident in its latest state
(at most :data:`ALERT_LINES`, then a count) and buttons to the incident and the runbook. Each
later change edits it and adds a thread reply naming the change (replies do not notify the
channel: no ``reply_broadcast``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from app.notify.channels import common, incident_text, slack
from app.notify.channels.base import (
    ChannelConfig,
    EditingKind,
    NoticeGroup,
    OutboundRequest,
    Outcome,
)

API_URL = "https://slack.com/api"
ALERT_LINES = 15
#: ``ok: false`` errors meaning the message can no longer be edited.
GONE_ERRORS = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
#: ``ok: false`` errors meaning the channel's settings are wrong (broken until fixed).
BROKEN_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "missing_scope",
    }
)
RETRY_ERRORS = frozenset({"ratelimited", "internal_error", "service_unavailable", "fatal_error"})
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{6,}")


def method_url(config: ChannelConfig, method: str) -> str:
    """``<url>/<method>`` (``url`` empty → :data:`API_URL`)."""
    return (config.url or API_URL).rstrip("/") + "/" + method


def _headers(config: ChannelConfig) -> dict[str, str]:
    return {
        "Content-Type": "application/json; charset=utf-8",
        "Authorization": f"Bearer {config.secret or ''}",
    }


def incident_message(group: NoticeGroup) -> dict[str, Any]:
    """``text`` and ``blocks`` of the incident's message (``group.incident`` set)."""
    card = group.incident
    assert card is not None, "an incident message needs its incident"
    notices = list(group.notices)
    head = incident_text.title(card, notices)
    facts = "\n".join(f"*{k}:* {slack.escape(v)}" for k, v in incident_text.facts(card))
    links = [
        slack.link(n.dashboard_url, incident_text.alert_line(n)) for n in notices[:ALERT_LINES]
    ]
    lines = incident_text.fit_lines(links, len(notices), slack.SECTION_CHARS) if notices else []
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": common.truncate(head, slack.HEADER_CHARS),
                "emoji": True,
            },
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": _cut(facts)}},
    ]
    if lines:
        alerts = "\n".join(lines)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": alerts}})
    buttons = [("Open incident", card.url, "open-incident")]
    runbook = next((n.runbook_url for n in incident_text.firing(notices) if n.runbook_url), None)
    if runbook:
        buttons.append(("Runbook", runbook, "runbook"))
    blocks.append(
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": label},
                    "url": url,
                    "action_id": action_id,
                }
                for label, url, action_id in buttons
                if len(url) <= slack.BUTTON_URL_CHARS
            ],
        }
    )
    footer = common.first_line(["Fleetwatch", group.receiver])
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": slack.escape(footer)}],
        }
    )
    return {"text": slack.escape(common.truncate(head, slack.FALLBACK_CHARS)), "blocks": blocks}


def _cut(text: str) -> str:
    return common.truncate(text, slack.SECTION_CHARS)


class SlackAppKind(EditingKind):
    """A Slack app's bot token (``secret``) posting to one channel (``options.channel``, its
    ID); ``url`` is the Web API base (empty: https://slack.com/api)."""

    kind = "slack_app"
    default_url = API_URL
    rate_limit = (1, 1.0)

    def rate_key(self, config: ChannelConfig) -> str:
        """Slack limits chat.postMessage per channel of a workspace (the token's)."""
        return f"{config.url or API_URL}#{config.options.get('channel', '')}#{config.secret or ''}"

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """Notices of no incident: :mod:`~app.notify.channels.slack`'s messages, each one
        ``chat.postMessage`` to the channel."""
        channel = self._channel(config)
        chunks = common.pack(
            group.notices, fits=lambda _: True, max_items=slack.NOTICES_PER_MESSAGE
        )
        requests: list[OutboundRequest] = []
        start = 0
        for part, chunk in enumerate(chunks, start=1):
            body = slack.message(group, chunk, start=start, part=part, parts=len(chunks))
            start += len(chunk)
            requests.append(
                OutboundRequest(
                    url=method_url(config, "chat.postMessage"),
                    body=common.json_bytes({"channel": channel, **body}),
                    headers=_headers(config),
                    covers=tuple(range(start - len(chunk), start)),
                )
            )
        return requests

    def build_post(self, group: NoticeGroup, config: ChannelConfig) -> OutboundRequest:
        """``chat.postMessage`` of the incident's message."""
        body = {"channel": self._channel(config), **incident_message(group)}
        return OutboundRequest(
            url=method_url(config, "chat.postMessage"),
            body=common.json_bytes(body),
            headers=_headers(config),
        )

    def build_update(
        self, group: NoticeGroup, config: ChannelConfig, ref: Mapping[str, str]
    ) -> list[OutboundRequest]:
        """``chat.update`` of message ``ref`` (``channel``, ``ts``), then a thread reply
        (``chat.postMessage`` with ``thread_ts``) listing the incident's changes."""
        card = group.incident
        assert card is not None, "an incident message needs its incident"
        channel, ts = ref["channel"], ref["ts"]
        update = {"channel": channel, "ts": ts, **incident_message(group)}
        requests = [
            OutboundRequest(
                url=method_url(config, "chat.update"),
                body=common.json_bytes(update),
                headers=_headers(config),
            )
        ]
        if card.changes:
            lines = [slack.escape(common.truncate(line, 500)) for line in card.changes]
            text = "\n".join(
                incident_text.fit_lines(lines, len(lines), slack.SECTION_CHARS, noun="changes")
            )
            reply = {"channel": channel, "thread_ts": ts, "text": text}
            requests.append(
                OutboundRequest(
                    url=method_url(config, "chat.postMessage"),
                    body=common.json_bytes(reply),
                    headers=_headers(config),
                )
            )
        return requests

    def message_ref(self, body: bytes) -> dict[str, str] | None:
        """``{"channel", "ts"}`` of an ``ok`` answer."""
        parsed = _json(body)
        if parsed.get("ok") is True and parsed.get("channel") and parsed.get("ts"):
            return {"channel": str(parsed["channel"]), "ts": str(parsed["ts"])}
        return None

    def message_here(self, config: ChannelConfig, ref: Mapping[str, str]) -> bool:
        """The message is in the configured channel (``options.channel`` changed since, the
        old channel perhaps archived: an edit there would answer ``is_archived`` or
        ``channel_not_found`` and mark the working channel broken)."""
        return ref.get("channel") == self._channel(config)

    def message_gone(self, status_code: int, body: bytes) -> bool:
        """``message_not_found``, ``cant_update_message``, ``edit_window_closed``."""
        return _json(body).get("error") in GONE_ERRORS

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """HTTP rules first (429 with ``Retry-After``, 5xx); then Slack's ``ok``/``error``."""
        outcome = common.safe_interpret("Slack", status_code, headers, body)
        if not outcome.ok:
            return outcome
        parsed = _json(body)
        if parsed.get("ok") is True:
            return Outcome(ok=True, detail=f"Slack: HTTP {status_code}")
        error = str(parsed.get("error") or "no ok in the answer")
        detail = f"Slack: {common.safe_snippet(error.encode())}"
        if error in RETRY_ERRORS:
            return Outcome(ok=False, detail=detail, retryable=True)
        return Outcome(ok=False, detail=detail, broken=error in BROKEN_ERRORS)

    def validate(self, config: ChannelConfig) -> None:
        """The bot token (``secret``, ``xoxb-…``) and ``options.channel`` (an ID) are
        required."""
        if not config.secret or not config.secret.startswith("xox"):
            raise ValueError("secret: the Slack app's bot token (xoxb-…) is required")
        self._channel(config)

    def _channel(self, config: ChannelConfig) -> str:
        channel = (config.options.get("channel") or "").strip()
        if not _CHANNEL_ID.fullmatch(channel):
            raise ValueError(
                "options.channel: the Slack channel ID (C0123ABCD, from the channel's details),"
                " not its name: chat.update takes IDs only"
            )
        return channel


def _json(body: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
