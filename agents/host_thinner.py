"""Which host readings (disks, mounts, NFS mounts, NIC ports) the agent sends: every
``interval_s`` as the mean of the rounds read since, and at once when something an SRE acts on
changes.

The host sources are still read every round (state changes are seen within one sample), but
only one reading per entity and interval is sent. Rates and gauges (``*_per_s``, ``*_iops``,
``*_pct``, ``avg_wait_s``, ``avg_rtt_s``) are sent as their time-weighted mean over the rounds
since the entity was last sent: each round's rate is a counter delta over the time since the
round before, so the weighted mean is the delta over the whole interval ÷ its length, what a
reader sampling every ``interval_s`` would have computed. Everything else (states, sizes,
cumulative counters) is the newest round's.

An entity is sent alone, at once, when a watched field differs from what was last sent for it
(:data:`WATCHED`: an IB port's state, physical state, rate or link-down counter; a remount), or
when it was not in the previous round (new, or back). A port whose state changed, or an entity
that vanished, since the previous round also makes the round *urgent*
(:attr:`HostThinner.urgent`): the agent cuts its batch at once, so an IB port going down pages
without waiting for the batch interval.

At the agent's 5-s sampling an HGX node's 15 host entities were ~260,000 rows a day (about
45 MB stored); at the 60-s default, 21,600.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

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
_MEAN_NAMES = frozenset({"avg_wait_s", "avg_rtt_s"})


def averaged(name: str) -> bool:
    """Whether field ``name`` is a rate or gauge sent as its mean over the interval."""
    return name.endswith(_MEAN_SUFFIXES) or name in _MEAN_NAMES


@dataclass
class _Pending:
    """An entity's rounds since it was last sent: seconds covered and value × seconds sums."""

    seconds: float = 0.0
    sums: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)


class HostThinner:
    """Decides per round which host readings go into the batch, and what they carry.

    ``interval_s`` 0 sends every round as read (the agent's behaviour before this class).

    Raises:
        ValueError: ``interval_s`` is negative or more than a day.
    """

    def __init__(self, interval_s: float) -> None:
        if not 0 <= interval_s <= MAX_INTERVAL_S:
            raise ValueError(f"host interval must be 0 to {MAX_INTERVAL_S:.0f} s, got {interval_s}")
        self.interval = timedelta(seconds=interval_s)
        self._sent_at: datetime | None = None
        self._round_at: datetime | None = None
        self._sent: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._pending: dict[tuple[Any, ...], _Pending] = {}
        self._previous: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: Whether the last :meth:`due` saw a port change state or an entity vanish.
        self.urgent = False

    def due(
        self, sections: dict[str, list[dict[str, Any]]], now: datetime
    ) -> dict[str, list[dict[str, Any]]]:
        """The entries of ``sections`` (host sections read at ``now``) to send: all of them,
        rates and gauges averaged, when the interval is over; else those that changed or are
        new (empty sections left out). Sections this class does not know pass unchanged."""
        seconds = 0.0 if self._round_at is None else (now - self._round_at).total_seconds()
        self._round_at = now
        seen_before = set(self._previous)
        self._note_urgency(sections)
        if not self.interval:
            return {name: list(entries) for name, entries in sections.items() if entries}
        full = self._sent_at is None or now - self._sent_at >= self.interval
        if full:
            self._sent_at = now
        out: dict[str, list[dict[str, Any]]] = {}
        for name, entries in sections.items():
            if name not in KEYS:
                if entries:
                    out[name] = list(entries)
                continue
            chosen = []
            for entry in entries:
                key = _key(name, entry)
                pending = self._pending.setdefault(key, _Pending())
                _accumulate(pending, entry, max(seconds, 0.0))
                watched = tuple(entry.get(f) for f in WATCHED[name])
                if full or key not in seen_before or self._sent.get(key) != watched:
                    chosen.append(_mean(entry, pending))
                    self._sent[key] = watched
                    self._pending[key] = _Pending()
            if chosen:
                out[name] = chosen
        return out

    def _note_urgency(self, sections: dict[str, list[dict[str, Any]]]) -> None:
        current = {
            _key(name, entry): tuple(entry.get(f) for f in URGENT.get(name, ()))
            for name, entries in sections.items()
            if name in KEYS
            for entry in entries
        }
        self.urgent = bool(self._previous) and any(
            current.get(key, ("gone",)) != value for key, value in self._previous.items()
        )
        self._previous = current


def _key(section: str, entry: dict[str, Any]) -> tuple[Any, ...]:
    return (section, *(entry.get(f) for f in KEYS[section]))


def _accumulate(pending: _Pending, entry: dict[str, Any], seconds: float) -> None:
    """Add one round of ``entry``'s averaged fields, weighted by the ``seconds`` it covers (a
    first round, covering nothing yet, weighs one second so it is not lost)."""
    weight = seconds if seconds > 0 else 1.0
    pending.seconds += weight
    for name, value in entry.items():
        if averaged(name) and isinstance(value, int | float) and not isinstance(value, bool):
            pending.sums[name] = pending.sums.get(name, 0.0) + value * weight
            pending.weights[name] = pending.weights.get(name, 0.0) + weight


def _mean(entry: dict[str, Any], pending: _Pending) -> dict[str, Any]:
    """``entry`` (the newest round) with each averaged field replaced by its weighted mean
    over the rounds in ``pending`` (a field missing from every round stays as it is)."""
    out = dict(entry)
    for name, total in pending.sums.items():
        if name in out and out[name] is not None:
            out[name] = total / pending.weights[name]
    return out
