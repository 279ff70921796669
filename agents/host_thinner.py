"""Which host readings (disks, mounts, NFS mounts, NIC ports) the agent sends: every
``interval_s`` as the mean of the rounds read since, and at once when something an SRE acts on
changes.

The host sources are still read every round (state changes are seen within one sample), but
only one reading per entity and interval is sent. Rates and gauges (``*_per_s``, ``*_iops``,
``*_pct``) are sent as their time-weighted mean over the rounds since the entity was last sent:
each round's rate is a counter delta over the time since the round before, so the weighted
mean is the delta over the whole interval ÷ its length, what a reader sampling every
``interval_s`` would have computed. Per-operation latencies (``avg_wait_s``, ``avg_rtt_s``) are
weighted by the operations of each round instead (:data:`PER_OPERATION`), which is the same
reader's total wait ÷ total operations. Everything else (states, sizes, cumulative counters)
is the newest round's. Full rounds keep a fixed schedule (a round half a sample early is on
time), so jitter does not stretch 60 s to 65.

An entity is sent alone, at once, when a watched field differs from what was last sent for it
(:data:`WATCHED`: an IB port's state, physical state, rate or link-down counter; a remount), or
when it was not in the previous round (new, or back). A port whose state changed, or an entity
that vanished, since the previous round also makes the round *urgent*
(:attr:`HostThinner.urgent`): the agent cuts its batch at once, so an IB port going down pages
without waiting for the batch interval.

Sent every 5-s sample, an HGX node's 15 host entities were ~260,000 rows a day (about 45 MB
stored); at the 60-s default, 21,600.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agents.send_schedule import FullRounds

#: The longest interval accepted, seconds (a day).
MAX_INTERVAL_S = 86400.0
#: Section → the fields that identify an entry.
KEYS: dict[str, tuple[str, ...]] = {
    "disks": ("device",),
    "mounts": ("mountpoint",),
    "nfs_mounts": ("mountpoint",),
    "nic_ports": ("device", "port"),
}
#: Section → the fields whose change is sent at once.
WATCHED: dict[str, tuple[str, ...]] = {
    "disks": (),
    "mounts": ("device", "fstype"),
    "nfs_mounts": ("export", "version"),
    "nic_ports": (
        "state",
        "phys_state",
        "rate_gbps",
        "link_layer",
        "link_downed_count",
        "link_error_recovery_count",
    ),
}
#: Section → the fields whose change since the previous round makes the round urgent.
URGENT: dict[str, tuple[str, ...]] = {"nic_ports": ("state", "phys_state")}
_MEAN_SUFFIXES = ("_per_s", "_iops", "_pct")
#: Per-operation latencies → the rate fields counting the operations they average over: a
#: reader over the interval divides total wait by total operations, so each round weighs its
#: seconds × operations per second (by time alone, one slow I/O in an idle round looked like
#: a minute of slow disk).
PER_OPERATION = {
    "avg_wait_s": ("read_iops", "write_iops"),
    "avg_rtt_s": ("ops_per_s",),
}


def averaged(name: str) -> bool:
    """Whether field ``name`` is a rate or gauge sent as its mean over the interval."""
    return name.endswith(_MEAN_SUFFIXES) or name in PER_OPERATION


@dataclass
class _Pending:
    """An entity's rounds since it was last sent: per averaged field, Σ value × weight and
    Σ weight (weights: seconds, or operations for :data:`PER_OPERATION` fields)."""

    sums: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)


class HostThinner:
    """Decides per round which host readings go into the batch, and what they carry.

    ``interval_s`` 0 sends every round as read (the agent's behaviour before this class).
    Never raises on odd input: an entry that is not an object passes through as read, and a
    value that is not a finite number is left out of its mean.

    Raises:
        ValueError: ``interval_s`` is negative or more than a day.
    """

    def __init__(self, interval_s: float) -> None:
        if not 0 <= interval_s <= MAX_INTERVAL_S:
            raise ValueError(f"host interval must be 0 to {MAX_INTERVAL_S:.0f} s, got {interval_s}")
        self.interval = timedelta(seconds=interval_s)
        self._rounds = FullRounds(self.interval) if self.interval else None
        self._round_at: datetime | None = None
        self._sent: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._pending: dict[tuple[Any, ...], _Pending] = {}
        self._previous: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: Whether the last :meth:`due` saw a port change state or an entity vanish.
        self.urgent = False

    def due(self, sections: dict[str, Any], now: datetime) -> dict[str, list[Any]]:
        """The entries of ``sections`` (host sections read at ``now``) to send: all of them,
        rates and gauges averaged, when the interval is over; else those that changed or are
        new (empty sections left out). Sections this class does not know, and sections that
        are not lists, pass unchanged."""
        seconds = 0.0 if self._round_at is None else (now - self._round_at).total_seconds()
        self._round_at = now
        seen_before = set(self._previous)
        self._note_urgency(sections)
        if self._rounds is None:
            return {name: list(v) for name, v in sections.items() if isinstance(v, list) and v}
        full = self._rounds.due(now)
        out: dict[str, list[Any]] = {}
        for name, entries in sections.items():
            if name not in KEYS or not isinstance(entries, list):
                if entries:
                    out[name] = entries
                continue
            chosen: list[Any] = []
            for entry in entries:
                if not isinstance(entry, dict):
                    chosen.append(entry)  # the server names what is wrong with it
                    continue
                key = _key(name, entry)
                if key not in seen_before:
                    self._pending[key] = _Pending()  # back after a gap: no stale readings
                pending = self._pending.setdefault(key, _Pending())
                _accumulate(pending, entry, seconds)
                watched = tuple(_hashable(entry.get(f)) for f in WATCHED[name])
                if full or key not in seen_before or self._sent.get(key) != watched:
                    chosen.append(_mean(entry, pending))
                    self._sent[key] = watched
                    self._pending[key] = _Pending()
            if chosen:
                out[name] = chosen
        if full:  # forget entities gone since (a node whose mounts come and go)
            for key in set(self._pending) - set(self._previous):
                self._pending.pop(key, None)
                self._sent.pop(key, None)
        return out

    def _note_urgency(self, sections: dict[str, Any]) -> None:
        current = {
            _key(name, entry): tuple(_hashable(entry.get(f)) for f in URGENT.get(name, ()))
            for name, entries in sections.items()
            if name in KEYS and isinstance(entries, list)
            for entry in entries
            if isinstance(entry, dict)
        }
        self.urgent = bool(self._previous) and any(
            current.get(key, ("gone",)) != value for key, value in self._previous.items()
        )
        self._previous = current


def _hashable(value: Any) -> Any:
    """``value`` as a dictionary key part (lists and objects as their text)."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _key(section: str, entry: dict[str, Any]) -> tuple[Any, ...]:
    return (section, *(_hashable(entry.get(f)) for f in KEYS[section]))


def _number(value: Any) -> float | None:
    """``value`` as a finite float, else None (booleans, text, NaN, ±inf, huge integers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _accumulate(pending: _Pending, entry: dict[str, Any], seconds: float) -> None:
    """Add one round of ``entry``'s averaged fields, weighted by the ``seconds`` it covers (a
    first round, or one at the same moment, weighs one second so it is not lost) or, for a
    per-operation latency, by the operations in those seconds."""
    span = seconds if seconds > 0 else 1.0
    for name, value in entry.items():
        if not averaged(name):
            continue
        number = _number(value)
        if number is None:
            continue
        weight = span
        if name in PER_OPERATION:
            ops = [_number(entry.get(f)) for f in PER_OPERATION[name]]
            if all(o is not None and o >= 0 for o in ops):
                weight = span * sum(o for o in ops if o is not None)
            if weight <= 0:
                continue  # no operation in the round: no latency to average
        total = pending.sums.get(name, 0.0) + number * weight
        if not math.isfinite(total):
            continue
        pending.sums[name] = total
        pending.weights[name] = pending.weights.get(name, 0.0) + weight


def _mean(entry: dict[str, Any], pending: _Pending) -> dict[str, Any]:
    """``entry`` (the newest round) with each averaged field replaced by its weighted mean
    over the rounds in ``pending``; a field with no usable value in any round stays as read
    (a newest None is replaced by the mean of the rounds that had one)."""
    out = dict(entry)
    for name, total in pending.sums.items():
        weight = pending.weights.get(name, 0.0)
        if weight > 0:
            out[name] = total / weight
    return out
