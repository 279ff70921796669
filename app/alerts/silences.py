"""Alertmanager-style label matchers (``=``, ``!=``, ``=~``, ``!~``; regexes fully anchored, as
Alertmanager anchors them) and which silences mute a set of labels now."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import lru_cache

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.models import AlertSilence

MATCH_OPS = ("=", "!=", "=~", "!~")


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(f"(?:{pattern})")


def check_regex(pattern: str) -> None:
    """Raises ValueError with the reason when ``pattern`` is not a valid regex."""
    try:
        _regex(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None


def matches(matchers: Iterable[Mapping[str, str]], labels: Mapping[str, str]) -> bool:
    """True when every matcher holds for ``labels`` (a missing label is the empty string, as in
    Alertmanager)."""
    for m in matchers:
        value, op, want = labels.get(m["name"], ""), m["op"], m["value"]
        if op == "=" and value != want:
            return False
        if op == "!=" and value == want:
            return False
        if op == "=~" and not _regex(want).fullmatch(value):
            return False
        if op == "!~" and _regex(want).fullmatch(value):
            return False
    return True


def active_silences(session: Session, *, now: datetime) -> list[AlertSilence]:
    """Silences in force at ``now`` (``starts_at <= now < ends_at``)."""
    return list(
        session.scalars(
            select(AlertSilence).where(AlertSilence.starts_at <= now, AlertSilence.ends_at > now)
        )
    )


def is_silenced(silences: Iterable[AlertSilence], labels: Mapping[str, str]) -> bool:
    """Whether any of ``silences`` matches ``labels``."""
    return any(matches(s.matchers, labels) for s in silences)
