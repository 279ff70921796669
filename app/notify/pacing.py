"""Pacing per destination: every request to a webhook URL (or PagerDuty routing key) takes a
slot from one schedule kept in ``notify_destination``, shared by all worker threads and, on
Postgres, all server processes; a 429 or ``Retry-After`` holds back every message to it.

Slots are spaced evenly, ``per_s / requests`` apart (Discord's 5 per 2 s → one every 0.4 s):
never a burst, so any window of ``per_s`` seconds holds at most ``requests`` of ours, whichever
way the service counts its window. A reservation is one short transaction that locks the
destination's row (``SELECT … FOR UPDATE`` on Postgres; SQLite's single writer, plus a process
lock so threads do not wait on ``database is locked``).

Paces: a kind's documented :attr:`~app.notify.channels.base.ChannelKind.rate_limit`, else none;
the ``notify_rate_limits`` setting overrides it per kind and a channel's ``rate_limit`` option
per channel; a pace is written ``"5/2s"`` (5 requests per 2 seconds), ``"1/s"``, or ``"off"``.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.notify.channels.base import ChannelConfig, ChannelKind
from app.notify.models import NotifyDestination

_PACE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*s?\s*$")
#: The fraction added to the spacing of slots (see :attr:`Pace.interval_s`).
SLACK = 0.1
#: Bounds of a pace: requests per period, and the period in seconds (a day).
MAX_REQUESTS = 100_000
MAX_PERIOD_S = 86_400.0
#: How long a 429 without any wait in it holds the destination, in seconds.
DEFAULT_HOLD_S = 1.0


@dataclass(frozen=True)
class Pace:
    """At most ``requests`` per ``per_s`` seconds."""

    requests: int
    per_s: float

    @property
    def interval_s(self) -> float:
        """Seconds between two slots: ``per_s / requests`` and :data:`SLACK` of it more,
        because requests sent exactly that far apart can arrive closer (one waited on its
        connection) and a service counting a sliding window would refuse the last."""
        return self.per_s / self.requests * (1 + SLACK)

    def __str__(self) -> str:
        return f"{self.requests}/{self.per_s:g}s"


def parse_pace(text: str) -> Pace | None:
    """``"5/2s"``, ``"5/2"``, ``"1/s"`` → :class:`Pace`; ``"off"``, ``"0"`` or ``""`` → ``None``
    (no limit). Raises ``ValueError`` naming the expected form."""
    raw = text.strip().lower()
    if raw in ("", "off", "0", "none"):
        return None
    match = _PACE.match(raw)
    bad = f"{text[:40]!r} is not a pace like '5/2s' (requests/seconds) or 'off'"
    if not match or len(match.group(1)) > 6 or len(match.group(2) or "") > 12:
        raise ValueError(bad)
    requests, per_s = int(match.group(1)), float(match.group(2) or 1)
    # A day at most: a longer period overflowed the schedule's datetime and stopped every send
    # to the destination (the request counts are as free as the documented limits need).
    if not 1 <= requests <= MAX_REQUESTS or not 0 < per_s <= MAX_PERIOD_S:
        raise ValueError(
            f"{bad}: 1 to {MAX_REQUESTS:,} requests per up to {MAX_PERIOD_S:,.0f} seconds"
        )
    return Pace(requests, per_s)


def pace_for(
    kind: ChannelKind, options: Mapping[str, str], overrides: Mapping[str, str]
) -> Pace | None:
    """The pace of a channel: its ``rate_limit`` option, else ``overrides[kind]`` (the
    ``notify_rate_limits`` setting), else the kind's documented limit. Raises ``ValueError``
    for an unreadable option or setting."""
    if "rate_limit" in options:
        return parse_pace(options["rate_limit"])
    if kind.kind in overrides:
        return parse_pace(overrides[kind.kind])
    return Pace(*kind.rate_limit) if kind.rate_limit else None


def destination_key(kind: ChannelKind, config: ChannelConfig) -> str:
    """SHA-256 (hex) of what the service limits by: never the URL itself, a secret."""
    return hashlib.sha256(kind.rate_key(config).encode()).hexdigest()


@dataclass(frozen=True)
class Slot:
    """A reservation: wait ``wait_s`` seconds, then send; or, when ``held_until`` is set,
    nothing was reserved and nothing may be sent before then."""

    wait_s: float = 0.0
    held_until: datetime | None = None


class Pacer:
    """Reserves slots and records holds in ``notify_destination`` through ``factory``."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        self.postgres = factory.kw["bind"].dialect.name == "postgresql"
        # SQLite: threads queue here rather than on the file lock; Postgres locks the row.
        self._lock: AbstractContextManager[object] = (
            nullcontext() if self.postgres else threading.Lock()
        )

    def _row(self, session: Session, key: str, now: datetime) -> NotifyDestination:
        """The destination's row, created when missing, locked until the transaction ends."""
        values = {"key": key, "next_allowed_at": now, "updated_at": now}
        insert = pg_insert if self.postgres else sqlite_insert
        session.execute(insert(NotifyDestination).values(values).on_conflict_do_nothing())
        stmt = select(NotifyDestination).where(NotifyDestination.key == key)
        if self.postgres:
            stmt = stmt.with_for_update()
        row = session.scalars(stmt.execution_options(populate_existing=True)).one()
        return row

    def reserve(self, key: str, pace: Pace | None, *, max_wait_s: float) -> Slot:
        """The next slot of ``key`` under ``pace`` when it comes within ``max_wait_s``
        seconds and no hold lasts longer; else a :class:`Slot` with ``held_until`` (nothing
        reserved). Without a pace only holds count."""
        with self._lock, session_scope(self.factory) as session:
            now = utcnow()
            row = self._row(session, key, now)
            start = max(now, row.held_until or now)
            if pace is not None:
                start = max(start, row.next_allowed_at)
            wait_s = (start - now).total_seconds()
            if wait_s > max_wait_s:
                return Slot(held_until=start)
            if pace is not None:
                row.next_allowed_at = start + timedelta(seconds=pace.interval_s)
                row.updated_at = now
            return Slot(wait_s=wait_s)

    def held_until(self, key: str) -> datetime | None:
        """When the hold on ``key`` ends, ``None`` when it is not held now."""
        with session_scope(self.factory) as session:
            until = session.scalar(
                select(NotifyDestination.held_until).where(NotifyDestination.key == key)
            )
        return until if until is not None and until > utcnow() else None

    def hold(self, key: str, *, seconds: float | None) -> datetime:
        """Hold every message to ``key`` for ``seconds`` (``None``: :data:`DEFAULT_HOLD_S`)
        from now, unless a longer hold is on; returns when the hold ends."""
        with self._lock, session_scope(self.factory) as session:
            now = utcnow()
            row = self._row(session, key, now)
            until = now + timedelta(seconds=DEFAULT_HOLD_S if seconds is None else seconds)
            if row.held_until is None or row.held_until < until:
                row.held_until = until
            row.next_allowed_at = max(row.next_allowed_at, row.held_until)
            row.updated_at = now
            return row.held_until
