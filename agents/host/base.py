"""What every host source shares: rates from two readings of cumulative kernel counters, and
the collection errors a source keeps until the agent asks for them.

The rate rules are the contract's (docs/ingest.md, "disks"): the first reading of a thing gives
``None`` rates, and so does any interval in which one of its counters went backwards (a 32-bit
counter that wrapped, a device removed and added again, a remount). A rate is never negative.
Counters stay Python ints end to end, so 64-bit values are exact; only rates are floats.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

from agents.collectors.host import HostSource

#: Errors are cut to what the ``collection`` section accepts (docs/ingest.md, "collection").
MAX_ERROR_CHARS = 1024
#: The largest value the server stores for a cumulative counter (an unsigned 64-bit integer).
MAX_COUNTER = 2**64 - 1

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


def last_per_key(items: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    """``items`` keeping only the last of those with the same ``key``, in the order of the kept
    ones. A mount point mounted over shows its older mounts first in the kernel's tables; only
    the last one is visible (and what ``statvfs`` reports), and the server keys entries by
    mount point, so a second entry would be dropped there as a duplicate anyway."""
    listed = list(items)
    last = {key(item): index for index, item in enumerate(listed)}
    return [item for index, item in enumerate(listed) if last[key(item)] == index]


def too_long(entry: Mapping[str, object], limits: Mapping[str, int]) -> str | None:
    """The first text field of ``entry`` longer than its limit in ``limits``, else ``None``.

    The server refuses a whole batch (422) for one text field over its schema limit, so an
    entry with such a field (a 600-character mount point) is left out with an error instead.
    """
    for name, limit in limits.items():
        value = entry.get(name)
        if isinstance(value, str) and len(value) > limit:
            return name
    return None


@dataclass(frozen=True)
class Interval:
    """The counters' increases between two readings of one thing and the seconds between them."""

    deltas: dict[str, int]
    seconds: float

    def per_second(self, *names: str, scale: int = 1) -> float | None:
        """``scale`` × the summed increase of ``names`` per second; ``None`` if one is unknown."""
        if any(name not in self.deltas for name in names):
            return None
        return sum(self.deltas[name] for name in names) * scale / self.seconds

    def ratio(self, numerators: Iterable[str], denominators: Iterable[str]) -> float | None:
        """Σ increases of ``numerators`` ÷ Σ increases of ``denominators``; ``None`` if one is
        unknown or the denominator did not move (nothing happened, so there is no average)."""
        top, bottom = list(numerators), list(denominators)
        if any(name not in self.deltas for name in (*top, *bottom)):
            return None
        divisor = sum(self.deltas[name] for name in bottom)
        if divisor <= 0:
            return None
        return sum(self.deltas[name] for name in top) / divisor


class RateTracker(Generic[K]):
    """Remembers the last reading of each thing (disk, mount, port) to turn the next one into an
    :class:`Interval`. Things not seen in a reading are forgotten, so one that comes back
    starts again with ``None`` rates."""

    def __init__(self) -> None:
        self._last: dict[K, tuple[datetime, dict[str, int]]] = {}
        self._seen: set[K] = set()

    def interval(
        self, key: K, now: datetime, counters: Mapping[str, int | None]
    ) -> Interval | None:
        """Record ``counters`` of ``key`` at ``now``; return the interval since the previous
        reading, or ``None`` for a first reading, a clock that did not advance, or a counter
        that went backwards. Counters that are ``None`` (not readable) are left out."""
        current = {name: value for name, value in counters.items() if value is not None}
        previous = self._last.get(key)
        self._last[key] = (now, current)
        self._seen.add(key)
        if previous is None:
            return None
        then, before = previous
        seconds = (now - then).total_seconds()
        if seconds <= 0:
            return None
        deltas: dict[str, int] = {}
        for name, value in current.items():
            if name not in before:
                continue
            if value < before[name]:
                return None
            deltas[name] = value - before[name]
        return Interval(deltas, seconds)

    def forget_unseen(self) -> None:
        """Drop what was not read since the last call (a device or mount that went away)."""
        for key in set(self._last) - self._seen:
            del self._last[key]
        self._seen.clear()


def exact_counter(value: int | None) -> int | None:
    """``value`` if the server can store it exactly (0 … 2⁶⁴−1), else ``None``."""
    if value is None or value < 0 or value > MAX_COUNTER:
        return None
    return value


class HostSourceBase(HostSource):
    """A :class:`HostSource` that keeps its collection errors until they are drained."""

    def __init__(self) -> None:
        self._errors: list[dict[str, str]] = []

    def collection_errors(self) -> list[dict[str, str]]:
        """Return and forget the errors since the last call."""
        errors, self._errors = self._errors, []
        return errors

    def _error(self, message: str) -> None:
        self._errors.append({"source": self.name, "message": message[:MAX_ERROR_CHARS]})

    def _read_text(self, path: Path) -> str | None:
        """The text of ``path``, or ``None`` with a collection error when it cannot be read."""
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            self._error(f"cannot read {path}: {exc.strerror or exc}")
            return None
