"""Discord webhook: one embed per notice, up to 10 embeds and 6,000 characters per message.

Limits from Discord's "Embed Limits": title 256, description 4,096, 25 fields, field name 256,
field value 1,024, footer text 2,048, all embed text of a message together 6,000, 10 embeds
per message. ``allowed_mentions: {"parse": []}`` stops ``@everyone``, ``@here``, role and user
mentions from pinging, and markdown in user text is backslash-escaped. Colour says the state
(also said by the title's icon and word). A 429 carries ``retry_after`` (float seconds) in its
JSON body as well as ``Retry-After``; 404 (Unknown Webhook) and 401 (Invalid Webhook Token)
mean the webhook is gone.

One message per incident, edited in place (Discord's "Execute Webhook" and "Edit Webhook
Message", discord.com/developers/docs/resources/webhook): the first page of an incident is
posted with ``?wait=true``, so Discord answers 200 with the created message object (its
``id``) instead of 204; each later change of the incident is ``PATCH
/webhooks/{webhook.id}/{webhook.token}/messages/{message.id}`` with the whole message
(``embeds`` replaced), answered with the edited message. A 404 whose JSON ``code`` is 10008
(Unknown Message: the message was deleted) means it cannot be edited: the change is posted as
a new message; 10015 (Unknown Webhook) is a broken channel as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from app.notify.channels import common, incident_text
from app.notify.channels.base import (
    AlertNotice,
    ChannelConfig,
    EditingKind,
    NoticeGroup,
    OutboundRequest,
    Outcome,
)

TITLE_CHARS = 256
DESCRIPTION_CHARS = 4096
MAX_FIELDS = 25
FIELD_NAME_CHARS = 256
FIELD_VALUE_CHARS = 1024
FOOTER_CHARS = 2048
MESSAGE_EMBED_CHARS = 6000
MAX_EMBEDS = 10
COLOURS = {"resolved": 0x2EB886, "critical": 0xD0021B, "warning": 0xF5A623, "info": 0x4A90D9}
OTHER_COLOUR = 0x9B9B9B
# (description, field value, label fields) caps per shrink level; level 0 alone fits 6,000.
_LEVELS = ((1500, 200, 18), (500, 100, 8), (200, 60, 0))
_MARKDOWN_SPECIALS = "\\*_~`|[]()<"
#: Discord's JSON error code of a message that no longer exists ("Unknown Message").
UNKNOWN_MESSAGE = 10008
INCIDENT_COLOURS = {"unhealthy": COLOURS["critical"], "degraded": COLOURS["warning"]}
ALERT_LINES = 15


def escape(text: str) -> str:
    """Backslash-escape Discord markdown (bold, italics, strike, code, spoilers, quotes,
    headings, lists, masked links, ``<…>`` mention and emoji syntax)."""
    return common.escape_markdown(text, _MARKDOWN_SPECIALS)


def units(text: str) -> int:
    """Length in UTF-16 code units: never less than the code-point count, so limits checked
    this way hold whichever of the two Discord counts (emoji count 2 here)."""
    return len(text.encode("utf-16-le")) // 2


def fit(text: str, limit: int) -> str:
    """``text`` (already escaped) cut with "…" to at most ``limit`` UTF-16 code units."""
    if units(text) <= limit:
        return text
    kept = used = 0
    for char in text:
        width = 2 if ord(char) > 0xFFFF else 1
        if used + width > limit - 1:  # one unit left for the "…"
            break
        used += width
        kept += 1
    return common.truncate_escaped(text, kept + 1)


def _text(text: str, limit: int) -> str:
    return fit(escape(text), limit)


def _link_url(url: str) -> str:
    """Parentheses and spaces percent-encoded so a URL cannot close the masked link early."""
    return url.replace("(", "%28").replace(")", "%29").replace(" ", "%20")


def embed_chars(embed: Mapping[str, Any]) -> int:
    """Characters Discord counts towards the 6,000 (title, description, field names and
    values, footer text, author name), counted as UTF-16 code units (see :func:`units`)."""
    total = units(embed.get("title", "")) + units(embed.get("description", ""))
    total += sum(units(f["name"]) + units(f["value"]) for f in embed.get("fields", []))
    total += units(embed.get("footer", {}).get("text", ""))
    return total + units(embed.get("author", {}).get("name", ""))


def notice_embed(group: NoticeGroup, notice: AlertNotice, level: int = 0) -> dict[str, Any]:
    """The embed for one notice at shrink ``level`` (0 full … 2 smallest)."""
    description_cap, value_cap, label_count = _LEVELS[level]
    title = f"{common.severity_icon(notice)} {common.severity_word(notice)}: {notice.summary}"
    link_line = " · ".join(f"[{label}]({_link_url(url)})" for label, url in common.links(notice))
    description = notice.annotations.get("description", "")
    text = _text(description, description_cap) if description else ""
    fields: list[dict[str, Any]] = [
        {"name": "Entity", "value": _text(common.entity_text(notice), value_cap), "inline": True}
    ]
    value = common.value_text(notice.value)
    if value is not None:
        fields.append({"name": "Value", "value": value, "inline": True})
    if notice.jobs_hit:
        jobs = _text("; ".join(notice.jobs_hit), value_cap)
        fields.append({"name": "Jobs hit", "value": jobs, "inline": False})
    names = sorted(notice.labels)
    for name in names[:label_count]:
        label_value = _text(notice.labels[name], value_cap) or "\u200b"
        fields.append({"name": _text(name, 100), "value": label_value, "inline": True})
    if len(names) > label_count:
        fields.append({"name": "Labels", "value": f"{len(names) - label_count} more not shown"})
    colour_key = "resolved" if notice.status == "resolved" else notice.severity
    embed: dict[str, Any] = {
        "title": _text(title, TITLE_CHARS),
        "url": notice.dashboard_url,
        "description": fit((text + "\n\n" if text else "") + link_line, DESCRIPTION_CHARS),
        "color": COLOURS.get(colour_key, OTHER_COLOUR),
        "fields": fields[:MAX_FIELDS],
        "footer": {"text": _text(common.first_line(["Fleetwatch", group.receiver]), 200)},
        "timestamp": common.rfc3339(
            notice.ends_at if notice.status == "resolved" and notice.ends_at else notice.starts_at
        ),
    }
    return embed


def with_query(url: str, **params: str) -> str:
    """``url`` with ``params`` added to its query (a ``thread_id`` already there is kept)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


def message_url(url: str, message_id: str) -> str:
    """``<webhook URL>/messages/<id>``, the webhook URL's query kept."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + f"/messages/{message_id}"))


def incident_body(group: NoticeGroup) -> dict[str, Any]:
    """The incident's message (``group.incident`` set): one embed, its title the incident's
    state, its description the facts and one line per alert in its latest state."""
    card = group.incident
    assert card is not None, "an incident message needs its incident"
    notices = list(group.notices)
    facts = "\n".join(f"**{name}:** {escape(value)}" for name, value in incident_text.facts(card))
    links = [
        f"[{escape(incident_text.alert_line(n))}]({_link_url(n.dashboard_url)})"
        for n in notices[:ALERT_LINES]
    ]
    room = DESCRIPTION_CHARS - units(facts) - 2
    lines = incident_text.fit_lines(links, len(notices), room, units) if notices else []
    description = facts + ("\n\n" + "\n".join(lines) if lines else "")
    live = incident_text.firing(notices)
    colour = INCIDENT_COLOURS.get(card.state, OTHER_COLOUR)
    if not card.open and not live:
        colour = COLOURS["resolved"]
    embed = {
        "title": _text(incident_text.title(card, notices), TITLE_CHARS),
        "url": card.url,
        "description": fit(description, DESCRIPTION_CHARS),
        "color": colour,
        "footer": {"text": _text(common.first_line(["Fleetwatch", group.receiver]), 200)},
        "timestamp": common.rfc3339(card.last_event_at),
    }
    return {"username": "Fleetwatch", "embeds": [embed], "allowed_mentions": {"parse": []}}


class DiscordKind(EditingKind):
    """Discord channel webhook (``https://discord.com/api/webhooks/<id>/<token>``)."""

    kind = "discord"
    rate_limit = (5, 2.0)  # per webhook, the bucket Discord's X-RateLimit-* headers describe

    def build(self, group: NoticeGroup, config: ChannelConfig) -> list[OutboundRequest]:
        """Messages of at most 10 embeds and 6,000 embed characters, notices in order."""
        embeds = []
        for notice in group.notices:
            for level in range(len(_LEVELS)):
                embed = notice_embed(group, notice, level)
                if embed_chars(embed) <= MESSAGE_EMBED_CHARS:
                    break
            if level:
                common.note_cut(f"alert {notice.alert_id} shortened (level {level}) to fit")
            embeds.append(embed)
        chunks = common.pack(
            embeds,
            fits=lambda c: sum(embed_chars(e) for e in c) <= MESSAGE_EMBED_CHARS,
            max_items=MAX_EMBEDS,
        )
        requests = []
        start = 0
        for part, chunk in enumerate(chunks, start=1):
            start += len(chunk)
            body: dict[str, Any] = {
                "username": "Fleetwatch",
                "embeds": chunk,
                "allowed_mentions": {"parse": []},
            }
            if group.is_test or len(chunks) > 1:
                heading = "Fleetwatch test message" if group.is_test else "Fleetwatch"
                if len(chunks) > 1:
                    heading += f" · part {part}/{len(chunks)}"
                body = {"content": heading, **body}
            requests.append(
                OutboundRequest(
                    url=config.url,
                    body=common.json_bytes(body),
                    headers={"Content-Type": "application/json"},
                    covers=tuple(range(start - len(chunk), start)),
                )
            )
        return requests

    def interpret(self, status_code: int, headers: Mapping[str, str], body: bytes) -> Outcome:
        """Default HTTP rules, plus 401 broken and a 429's JSON ``retry_after`` (seconds,
        float) when the ``Retry-After`` header is absent or smaller."""
        outcome = common.safe_interpret("Discord", status_code, headers, body)
        if status_code == 401:
            return Outcome(ok=False, detail=outcome.detail, broken=True)
        return outcome

    def build_post(self, group: NoticeGroup, config: ChannelConfig) -> OutboundRequest:
        """Execute Webhook with ``?wait=true`` (answered with the message and its ``id``)."""
        return OutboundRequest(
            url=with_query(config.url, wait="true"),
            body=common.json_bytes(incident_body(group)),
            headers={"Content-Type": "application/json"},
        )

    def build_update(
        self, group: NoticeGroup, config: ChannelConfig, ref: Mapping[str, str]
    ) -> list[OutboundRequest]:
        """Edit Webhook Message ``ref["id"]`` with the incident's whole message."""
        body = incident_body(group)
        del body["username"]  # not a field of an edit
        return [
            OutboundRequest(
                url=message_url(config.url, ref["id"]),
                body=common.json_bytes(body),
                headers={"Content-Type": "application/json"},
                method="PATCH",
            )
        ]

    def message_ref(self, body: bytes) -> dict[str, str] | None:
        """``{"id"}`` of the message object Discord answered with."""
        parsed = _json(body)
        found = parsed.get("id")
        return {"id": str(found)} if isinstance(found, str | int) and str(found) else None

    def message_gone(self, status_code: int, body: bytes) -> bool:
        """404 with code 10008 (Unknown Message)."""
        return status_code == 404 and _json(body).get("code") == UNKNOWN_MESSAGE


def _json(body: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
