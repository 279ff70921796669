"""Rates from cumulative counters that may go backwards (driver reload, GPU reset) or wrap.

A rate is only ever computed over an interval where the counter moved forward by a plausible
amount; anything else is a skipped interval (``None``), never a negative or absurd value.
"""

from __future__ import annotations


class CounterRate:
    """The per-second rate of one cumulative counter between successive readings.

    ``scale`` converts counter units to the rate's (KiB → bytes: 1024); ``max_rate`` is the
    largest plausible rate, above which the interval is skipped (a wrap read as a huge jump).
    """

    def __init__(self, *, scale: float = 1.0, max_rate: float | None = None) -> None:
        self.scale = scale
        self.max_rate = max_rate
        self._last: tuple[float, float] | None = None

    def update(self, value: float | None, at_s: float) -> float | None:
        """Record ``value`` read at ``at_s`` (seconds, monotonic or epoch) and return the rate
        since the previous reading; ``None`` on the first reading, after a missing one, when
        the counter went backwards, when time did not advance, or when the rate is absurd."""
        if value is None:
            self._last = None
            return None
        previous, self._last = self._last, (float(value), at_s)
        if previous is None:
            return None
        delta = float(value) - previous[0]
        elapsed = at_s - previous[1]
        if delta < 0 or elapsed <= 0:
            return None
        rate = delta * self.scale / elapsed
        if self.max_rate is not None and rate > self.max_rate:
            return None
        return rate

    def reset(self) -> None:
        """Forget the last reading (the device was lost or re-enumerated)."""
        self._last = None
