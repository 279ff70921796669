"""Increases of cumulative counters per interval, with counter resets as gaps.

The counters are those the agent reports as running totals since boot (or since mount):

* NFS ``retransmits`` (NFS mount readings): Σ over operations of (transmissions − ops) from the
  per-op lines of ``/proc/self/mountstats`` (``OP: ops transmissions timeouts …``, the format of
  fs/nfs/super.c ``nfs_show_stats`` / net/sunrpc/stats.c ``rpc_clnt_show_stats`` that nfs-utils'
  ``mountstats`` reads); 64-bit in the kernel.
* InfiniBand port error counters (IB port readings): ``symbol_error``, ``link_downed``,
  ``link_error_recovery``, ``port_rcv_errors``, ``port_xmit_discards`` from
  ``/sys/class/infiniband/<dev>/ports/<n>/counters/`` (IBA PortCounters; 8/16-bit counters that
  saturate instead of wrapping).

Disk rates are not recomputed here: the agent turns ``/proc/diskstats`` counters
(Documentation/admin-guide/iostats.rst: sectors read/written, ms reading/writing, ``io_ticks``)
into per-interval rates itself and stores ``None`` for an interval in which a counter went
backwards, which is the same rule as below.

Rule: the increase over an interval is ``later − earlier`` when ``later ≥ earlier``. When a
counter goes backwards it was reset (agent or host restart, remount, driver reload, ``perfquery
-R``) or wrapped past 2⁶⁴−1; the true increase is unknowable (a reset loses what was counted
before the read, and a 64-bit wrap is indistinguishable from a reset), so the interval is a gap
(``None``): never a negative value, and never the ~2⁶⁴ spike of a naive unsigned subtraction.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

#: The largest value of a 64-bit kernel counter.
U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Increase:
    """The increase of a counter from the reading at ``start`` to the one at ``end``; ``value``
    is ``None`` for a gap (a reset, a wrap, or a reading without the counter)."""

    start: datetime
    end: datetime
    value: int | None

    @property
    def seconds(self) -> float:
        """Length of the interval in seconds."""
        return (self.end - self.start).total_seconds()

    @property
    def per_s(self) -> float | None:
        """``value ÷ seconds``; ``None`` for a gap or an empty interval."""
        if self.value is None or self.seconds <= 0:
            return None
        return self.value / self.seconds


def increase(earlier: int | None, later: int | None) -> int | None:
    """``later − earlier`` for a counter that only grows; ``None`` when either reading is
    missing or the counter went backwards (reset or 64-bit rollover: a gap, see the module)."""
    if earlier is None or later is None or later < earlier:
        return None
    return later - earlier


def increases(points: Sequence[tuple[datetime, int | None]]) -> list[Increase]:
    """One :class:`Increase` per pair of neighbouring readings of ``points`` (time-ordered
    ``(time, cumulative value)``): ``n`` points give ``n − 1`` intervals.

    Example: values 10, 15, 3, 7 (an agent restart after 15) → increases 5, None, 4.
    """
    return [Increase(t0, t1, increase(v0, v1)) for (t0, v0), (t1, v1) in itertools.pairwise(points)]


def summed_increases(per_counter: Sequence[Sequence[Increase]]) -> list[Increase]:
    """Several counters of one thing (the five error counters of a port) read at the same times,
    as one series: per interval the sum of the counters' increases that are not gaps, or a gap
    when every counter's is.

    Raises:
        ValueError: the sequences do not cover the same intervals.
    """
    if not per_counter:
        return []
    first = per_counter[0]
    if any(len(other) != len(first) for other in per_counter):
        raise ValueError("the counters must be read at the same times")
    summed = []
    for i, interval in enumerate(first):
        known = [v for c in per_counter if (v := c[i].value) is not None]
        summed.append(Increase(interval.start, interval.end, sum(known) if known else None))
    return summed


def total(intervals: Sequence[Increase]) -> int:
    """Σ of the increases that are not gaps: what was counted during the intervals (a lower
    bound where there were gaps)."""
    return sum(i.value for i in intervals if i.value is not None)


def gaps(intervals: Sequence[Increase]) -> int:
    """How many intervals are gaps (resets, wraps, missing readings)."""
    return sum(i.value is None for i in intervals)
