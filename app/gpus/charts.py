"""GPU-page charts: the node page's four charts plus SM clock, PCIe and NVLink throughput and ECC
counters, for one GPU, and the ECC counter history as a list of increases.

Both functions are pure (a :class:`~app.fleet.schemas.SamplesOut` in, JSON-ready data out). The
figures are built by :mod:`app.fleet.charts` itself (its trace and layout builders), so
``static/js/charts.js`` refreshes them exactly as it refreshes the node page's, following each
figure's ``meta``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from app.fleet import charts as fleet_charts
from app.fleet.chart_marks import ChartMark, mark_trace
from app.fleet.charts import ChartSpec
from app.fleet.schemas import SamplesOut

GPU_CHARTS: tuple[ChartSpec, ...] = (
    *fleet_charts.CHARTS,
    ChartSpec("sm_clock_mhz", "SM clock", "MHz"),
    ChartSpec("pcie_tx_bytes_per_s", "PCIe TX", "MiB/s", scale=1 / 2**20),
    ChartSpec("pcie_rx_bytes_per_s", "PCIe RX", "MiB/s", scale=1 / 2**20),
    ChartSpec("nvlink_tx_bytes_per_s", "NVLink TX", "GiB/s", scale=1 / 2**30),
    ChartSpec("nvlink_rx_bytes_per_s", "NVLink RX", "GiB/s", scale=1 / 2**30),
    ChartSpec("ecc_corrected_volatile_count", "ECC corrected, volatile", "errors"),
    ChartSpec("ecc_uncorrected_volatile_count", "ECC uncorrected, volatile", "errors"),
)
#: Cumulative ECC counters whose increases make the error history
#: (``nvmlDeviceGetTotalEccErrors``, volatile = since the last driver load, aggregate = lifetime).
ECC_COUNTERS: tuple[str, ...] = (
    "ecc_corrected_volatile_count",
    "ecc_uncorrected_volatile_count",
    "ecc_corrected_aggregate_count",
    "ecc_uncorrected_aggregate_count",
)
GPU_CHART_METRICS: tuple[str, ...] = tuple(
    dict.fromkeys([c.metric for c in GPU_CHARTS] + list(ECC_COUNTERS))
)


def build_gpu_figures(
    samples: SamplesOut, *, zone: tzinfo = UTC, marks: Iterable[ChartMark] = ()
) -> list[dict[str, Any]]:
    """One figure per spec of :data:`GPU_CHARTS`, one trace per series of ``samples`` (the GPU
    page passes its one GPU's series), in the shape of :func:`app.fleet.charts.build_figures`
    (``{"id", "metric", "title", "meta", "overlay", "figure"}``) and drawn by its trace and
    layout builders: times on the wall clock of ``zone``, ``marks`` in the range as vertical
    lines (``layout.shapes``) plus one ``Events`` marker trace in ``overlay``, which
    ``charts.js`` draws after the GPU's trace."""
    in_range = [m for m in marks if samples.start <= m.at <= samples.end]
    to_x = functools.partial(fleet_charts.plotly_time, zone=zone)
    overlay = [mark_trace(in_range, to_x, zone)] if in_range else []
    series = sorted(samples.series, key=lambda s: s.gpu_index)
    gaps = {s.gpu_uuid: fleet_charts.gap_threshold_s(list(s.t), samples.step_s) for s in series}
    times: dict[datetime, str] = {}
    return [
        {
            "id": f"chart-{spec.metric}",
            "metric": spec.metric,
            "title": f"{spec.title} ({spec.unit})",
            "meta": {
                "metric": spec.metric,
                "scale": spec.scale,
                "unit": spec.unit,
                "empty_note": fleet_charts.EMPTY_NOTE,
                "tz": fleet_charts.zone_name(zone),
            },
            "overlay": overlay,
            "figure": {
                "data": [
                    fleet_charts._trace(s, spec, gaps[s.gpu_uuid], zone, times) for s in series
                ],
                "layout": fleet_charts._layout(spec, samples, zone, in_range),
            },
        }
        for spec in GPU_CHARTS
    ]


@dataclass(frozen=True)
class CounterIncrease:
    """A cumulative counter seen higher than at the previous point: ``before`` at ``after_at``'s
    predecessor, ``after`` at ``after_at``. A drop (volatile counters reset when the driver
    reloads) is not an increase and restarts the comparison."""

    metric: str
    at: datetime
    before: int
    after: int

    @property
    def delta(self) -> int:
        """How many errors were added."""
        return self.after - self.before


def counter_increases(
    samples: SamplesOut, metrics: tuple[str, ...] = ECC_COUNTERS
) -> list[CounterIncrease]:
    """Every increase of the ``metrics`` counters between neighbouring known points of the
    series in ``samples`` (nulls skipped), newest first. Points are the samples' buckets, so with
    a step the time is the bucket's start and the value its maximum."""
    found: list[CounterIncrease] = []
    for series in samples.series:
        for metric in metrics:
            known = [
                (t, int(v))
                for t, v in zip(series.t, series.values.get(metric, []), strict=False)
                if v is not None
            ]
            for (_, a), (t, b) in itertools.pairwise(known):
                if b > a:
                    found.append(CounterIncrease(metric, t, a, b))
    return sorted(found, key=lambda c: (c.at, c.metric), reverse=True)
