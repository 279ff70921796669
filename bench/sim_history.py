"""Deterministic simulated GPU history, node by node, from the project's own simulator.

Each node ``sim-{i:04d}`` is an 8-GPU :class:`~agents.simulated.collector.SimulatedCollector`
(HGX H100 shape) seeded from its hostname, sampled every ``step_s`` seconds from ``start``. The
same arguments always give the same samples: the simulator is seeded from the hostname and only
ever sees the ``now`` values passed here, never the wall clock.

    from datetime import UTC, datetime
    from sim_history import count_values, generate

    for hostname, samples in generate(2, 3.0, 5.0, datetime(2024, 1, 1, tzinfo=UTC)):
        print(hostname, len(samples), count_values(samples))

Memory is bounded by one node's history: ``hours * 3600 / step_s * 8`` sample dicts of about
40 keys (roughly 3 KB each), e.g. ~50 MB for 3 h at 5 s, ~400 MB for 24 h at 5 s.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.payload import ALL_METRIC_KEYS, Sample  # noqa: E402
from agents.simulated.collector import SimulatedCollector  # noqa: E402

#: GPUs per simulated node (the 8-GPU shape: HGX H100 with NVLink).
GPUS_PER_NODE = 8


def hostname_for(index: int) -> str:
    """Return the hostname of simulated node ``index`` (0-based): ``sim-0000``, ``sim-0001``…"""
    return f"sim-{index:04d}"


def step_count(hours: float, step_s: float) -> int:
    """Return the number of sampling instants in ``[start, start + hours)`` at ``step_s`` seconds
    apart (a float ratio just under an integer counts as that integer)."""
    if hours < 0 or step_s <= 0:
        raise ValueError("hours must be >= 0 and step_s > 0")
    return math.floor(hours * 3600.0 / step_s + 1e-9)


def generate(
    nodes: int, hours: float, step_s: float, start: datetime
) -> Iterator[tuple[str, list[Sample]]]:
    """Yield ``(hostname, samples)`` for each of ``nodes`` simulated nodes in turn.

    ``samples`` holds ``step_count(hours, step_s) * 8`` dicts in time order: at each instant
    ``start + k * step_s`` (k = 0, 1, …; seconds) one dict per GPU in GPU index order, with
    ``gpu_uuid`` (str), ``sampled_at`` (RFC 3339 str, millisecond precision) and every key of
    :data:`agents.payload.ALL_METRIC_KEYS` (int, float or ``None`` for an unreported metric).
    Units are those of the keys' suffixes (``_pct``, ``_bytes``, ``_w``, ``_j``, ``_c``,
    ``_mhz``, ``_bytes_per_s``, counts).

    Only one node's list is alive at a time if the caller drops it before the next one.

    Raises:
        ValueError: ``start`` is naive, ``nodes`` < 0, ``hours`` < 0 or ``step_s`` <= 0.
    """
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    if nodes < 0:
        raise ValueError("nodes must be >= 0")
    steps = step_count(hours, step_s)
    for i in range(nodes):
        hostname = hostname_for(i)
        collector = SimulatedCollector(hostname, GPUS_PER_NODE)
        samples: list[Sample] = []
        for k in range(steps):
            samples.extend(collector.sample(start + timedelta(seconds=k * step_s)))
        yield hostname, samples


def count_values(samples: Iterable[Sample]) -> int:
    """Return the number of non-null metric values (keys of ``ALL_METRIC_KEYS``) in
    ``samples``: one per (sample, metric) pair whose value is not ``None``."""
    return sum(1 for s in samples for key in ALL_METRIC_KEYS if s.get(key) is not None)


def generate_nvlinks(
    nodes: int, hours: float, step_s: float, nvlink_step_s: float, start: datetime
) -> Iterator[tuple[str, list[dict[str, object]]]]:
    """Yield ``(hostname, links)`` per node: the simulator stepped every ``step_s`` seconds (as
    :func:`generate` does) and its NVLinks read every ``nvlink_step_s`` (a multiple of
    ``step_s``): 8 GPUs × 18 links per reading, each an agent ``nvlinks`` entry.

    Raises:
        ValueError: ``start`` is naive, or ``nvlink_step_s`` is not a multiple of ``step_s``.
    """
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    every = round(nvlink_step_s / step_s)
    if every < 1 or abs(every * step_s - nvlink_step_s) > 1e-9:
        raise ValueError("nvlink_step_s must be a multiple of step_s")
    for i in range(nodes):
        collector = SimulatedCollector(hostname_for(i), GPUS_PER_NODE)
        links: list[dict[str, object]] = []
        for k in range(step_count(hours, step_s)):
            at = start + timedelta(seconds=k * step_s)
            collector.sample(at)
            if k % every == 0:
                links.extend(collector.nvlinks(at))
        yield hostname_for(i), links
