"""When a thinned section (NVLinks, host readings) sends every entry: on a fixed schedule.

Deciding by ``now - last_full >= interval`` stretches a 60-s interval to 65 s whenever a 5-s
round comes a couple of milliseconds early (scheduling jitter, a clock slewed by NTP): the
round is "not yet" and the next one is a whole sample late. Here full rounds are due at fixed
multiples of the interval from the first, and a round up to half a sampling period early
counts as on time.
"""

from __future__ import annotations

from datetime import datetime, timedelta


class FullRounds:
    """The schedule of full rounds every ``interval``.

    Raises:
        ValueError: ``interval`` is not positive.
    """

    def __init__(self, interval: timedelta) -> None:
        if interval <= timedelta(0):
            raise ValueError(f"interval must be positive, got {interval}")
        self.interval = interval
        self._next: datetime | None = None
        self._last_round: datetime | None = None

    def due(self, now: datetime) -> bool:
        """Whether the round read at ``now`` is a full one (the first always is; after the
        clock went back more than two intervals the schedule starts again from ``now``)."""
        gap = 0.0 if self._last_round is None else (now - self._last_round).total_seconds()
        self._last_round = now
        if self._next is None or now < self._next - 2 * self.interval:
            self._next = now + self.interval
            return True
        early = timedelta(seconds=min(max(gap, 0.0), self.interval.total_seconds()) / 2)
        if now + early < self._next:
            return False
        while self._next <= now + early:
            self._next += self.interval
        return True
