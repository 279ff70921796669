"""Alertmanager-style label matchers (``=``, ``!=``, ``=~``, ``!~``; regexes fully anchored, as
Alertmanager anchors them) and which silences mute a set of labels now.

Regexes are user input, so they run on RE2 (``google-re2``), the syntax Alertmanager matchers
use: matching is linear in the value's length, so ``(.+)+x`` cannot stall the server as
backtracking in Python's ``re`` does."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

import re2
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.models import AlertSilence

MATCH_OPS = ("=", "!=", "=~", "!~")
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad pattern is the user's 422, not a line on the server's stderr


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re2._Regexp:
    return re2.compile(f"(?:{pattern})", _OPTIONS)


def check_regex(pattern: str) -> None:
    """Raises ValueError with RE2's reason when ``pattern`` is not a valid RE2 regex (the syntax
    of Alertmanager matchers; no backreferences or lookaround)."""
    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(f"not a valid regular expression (RE2 syntax): {reason}") from None
    except UnicodeEncodeError:
        raise ValueError("not a valid regular expression: not encodable as UTF-8") from None


def _fullmatch(pattern: str, value: str) -> bool | None:
    try:
        return _regex(pattern).fullmatch(value) is not None
    except (re2.error, UnicodeEncodeError):
        return None  # a row stored before RE2 validation: its silence mutes nothing


def matches(matchers: Iterable[Mapping[str, str]], labels: Mapping[str, str]) -> bool:
    """True when every matcher holds for ``labels`` (a missing label is the empty string, as in
    Alertmanager)."""
    for m in matchers:
        value, op, want = labels.get(m["name"], ""), m["op"], m["value"]
        if op == "=" and value != want:
            return False
        if op == "!=" and value == want:
            return False
        if op in ("=~", "!~"):
            found = _fullmatch(want, value)
            if found is None or found != (op == "=~"):
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


@dataclass(frozen=True)
class Mutes:
    """What mutes an alert now: the silences in force, and the hostnames of the nodes in a
    maintenance window (:mod:`app.maintenance`), whose every alert is muted."""

    silences: Sequence[AlertSilence]
    hosts: Collection[str] = frozenset()

    def mute(self, labels: Mapping[str, str]) -> bool:
        """Whether an alert with ``labels`` is muted (its ``hostname`` in maintenance, or a
        silence matching)."""
        return labels.get("hostname") in self.hosts or is_silenced(self.silences, labels)
