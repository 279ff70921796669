"""The fleet storage page's query results, and the pure steps that shape them: picking the top N
series and summarising the rest, so a fleet of 1,000 nodes draws a dozen lines, not thousands."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

#: How the series left out of the top N are summarised per bucket: ``mean`` for gauges (the
#: typical latency or throughput of the rest), ``sum`` for counted events (retransmits, errors).
RestMode = Literal["mean", "sum"]


@dataclass(frozen=True)
class Series:
    """One line: ``item`` (a device, a mount point, ``mlx5_0/1``) of node ``hostname``.

    ``times`` are bucket starts (UTC); ``values`` align with them in the stored unit (bytes/s,
    seconds, events per minute); ``measure`` is what the series was ranked by (its mean or max
    over the range, or its total for counters)."""

    hostname: str
    item: str
    times: list[datetime] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)
    measure: float = 0.0

    @property
    def name(self) -> str:
        """``hostname item``, the legend entry."""
        return f"{self.hostname} {self.item}"


@dataclass(frozen=True)
class ChartData:
    """What one chart draws over ``[start, end]`` at ``step_s`` buckets: the ``top`` series
    (highest measure first), and ``rest``, the summary of the ``rest_count`` others (``None``
    when there are none)."""

    metric: str
    start: datetime
    end: datetime
    step_s: int
    top: list[Series]
    rest: Series | None = None
    rest_count: int = 0

    @property
    def empty(self) -> bool:
        """True when no series has a point in the range."""
        return not any(s.times for s in self.top) and not (self.rest and self.rest.times)


def pick_top(measures: Mapping[tuple[int, str], float | None], n: int) -> list[tuple[int, str]]:
    """The ``n`` keys with the highest measure (ties by key, so the choice is stable); keys
    whose measure is ``None`` (no value in the range) come last.

    Raises:
        ValueError: ``n`` is negative.
    """
    if n < 0:
        raise ValueError("n must be 0 or more")
    # nsmallest, not a full sort: 8,000 IB ports for a top 10.
    ranked = heapq.nsmallest(
        n, measures.items(), key=lambda kv: (kv[1] is None, -(kv[1] or 0.0), kv[0])
    )
    return [key for key, _ in ranked]


def rest_means(
    all_buckets: Mapping[datetime, tuple[float, int]],
    top_buckets: Sequence[Mapping[datetime, tuple[float, int]]],
) -> list[tuple[datetime, float]]:
    """The per-bucket mean of the series outside the top N, from SQL sums and counts:
    ``(Σ all − Σ top) ÷ (n all − n top)``; buckets where only top series had values are left
    out. Time-ordered ``(bucket, mean)``."""
    points = []
    for bucket in sorted(all_buckets):
        total, count = all_buckets[bucket]
        for top in top_buckets:
            top_total, top_count = top.get(bucket, (0.0, 0))
            total -= top_total
            count -= top_count
        if count > 0:
            points.append((bucket, total / count))
    return points


def rest_sums(series: Sequence[Series]) -> list[tuple[datetime, float]]:
    """Per bucket, the sum of the values of ``series`` that are not ``None`` (buckets where
    all are ``None`` left out). Time-ordered ``(bucket, sum)``."""
    sums: dict[datetime, float] = {}
    for s in series:
        for t, v in zip(s.times, s.values, strict=True):
            if v is not None:
                sums[t] = sums.get(t, 0.0) + v
    return sorted(sums.items())
