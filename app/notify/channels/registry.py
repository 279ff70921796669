"""The registry of channel kinds: the ``kind`` stored on a channel → its :class:`ChannelKind`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from app.notify.channels.alertmanager import AlertmanagerKind
from app.notify.channels.base import ChannelKind
from app.notify.channels.discord import DiscordKind
from app.notify.channels.pagerduty import PagerDutyKind
from app.notify.channels.slack import SlackKind
from app.notify.channels.slack_app import SlackAppKind
from app.notify.channels.teams import TeamsKind
from app.notify.channels.webhook import WebhookKind


class UnknownKindError(KeyError, ValueError):
    """A channel kind name that is not registered; the message lists the allowed names. Both
    a ``KeyError`` (mapping lookups) and a ``ValueError`` (input validation)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


KINDS: Mapping[str, ChannelKind] = MappingProxyType(
    {
        kind.kind: kind
        for kind in (
            SlackKind(),
            SlackAppKind(),
            TeamsKind(),
            DiscordKind(),
            PagerDutyKind(),
            WebhookKind(),
            AlertmanagerKind(),
        )
    }
)


def get_kind(name: str) -> ChannelKind:
    """The kind called ``name``; raises :class:`UnknownKindError` naming the allowed kinds."""
    try:
        return KINDS[name]
    except KeyError:
        allowed = ", ".join(sorted(KINDS))
        raise UnknownKindError(f"kind: unknown channel kind {name!r}; one of {allowed}") from None
