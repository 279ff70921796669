"""Fleet storage charts: the page's time range, and query results → Plotly figure dicts.

:func:`build_figure` is pure (a :class:`~app.storage.series.ChartData` in, a JSON-ready dict
out), shaped like :func:`app.fleet.charts.build_figures`' items so ``static/js/charts.js`` draws
it from the page's ``#chart-boot`` JSON. Legend names are HTML-escaped: Plotly renders a subset
of HTML in trace names, and a mount point is whatever the host's admin typed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.fleet.charts import EMPTY_NOTE, ChartRange, gap_threshold_s, plotly_time
from app.fleet.charts import resolve_chart_range as _resolve
from app.storage.series import ChartData, Series

#: The finest bucket, seconds: nodes sample at different instants, so the summary of the rest
#: needs buckets even for 15 minutes (agents report every 5–15 s).
MIN_STEP_S = 15
REST_COLOR = "#888888"


@dataclass(frozen=True)
class ChartSpec:
    """A chart of the page: the metric (:data:`app.storage.fleet_service.METRICS`), its title,
    displayed unit, factor from the stored unit (bytes/s → MiB/s), and how the rest of the series
    are summarised (``mean`` of gauges, ``sum`` of event rates)."""

    metric: str
    title: str
    unit: str
    scale: float = 1.0
    rest: str = "mean"
    digits: int = 1


MIB = 1 / 2**20
GIB = 1 / 2**30
CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("disk_read_bytes_per_s", "Disk read", "MiB/s", MIB),
    ChartSpec("disk_write_bytes_per_s", "Disk write", "MiB/s", MIB),
    ChartSpec("disk_avg_wait_s", "Disk latency per I/O", "ms", 1000.0, digits=2),
    ChartSpec("nfs_avg_rtt_s", "NFS READ/WRITE round trip", "ms", 1000.0, digits=2),
    ChartSpec("nfs_read_bytes_per_s", "NFS read", "MiB/s", MIB),
    ChartSpec("nfs_write_bytes_per_s", "NFS write", "MiB/s", MIB),
    ChartSpec("nfs_retransmits", "NFS retransmits", "per min", rest="sum"),
    ChartSpec("ib_errors", "IB port errors", "per min", rest="sum"),
    ChartSpec("ib_rx_bytes_per_s", "IB receive (port_rcv_data)", "GiB/s", GIB),
    ChartSpec("ib_tx_bytes_per_s", "IB transmit (port_xmit_data)", "GiB/s", GIB),
)
CHARTS_BY_METRIC = {c.metric: c for c in CHARTS}


def resolve_range(
    *,
    preset: str | None,
    start: str | None,
    end: str | None,
    now: datetime,
    raw_from: datetime | None = None,
) -> ChartRange:
    """:func:`app.fleet.charts.resolve_chart_range` (15m … 30d presets, or ``start``/``end``;
    the same 400s; a minute at least before ``raw_from``) with buckets of at least
    :data:`MIN_STEP_S`."""
    window = _resolve(preset=preset, start=start, end=end, now=now, raw_from=raw_from)
    return ChartRange(window.start, window.end, window.preset, max(window.step_s, MIN_STEP_S))


def _points(series: Series, scale: float, gap_s: float) -> tuple[list[str], list[float | None]]:
    xs: list[str] = []
    ys: list[float | None] = []
    previous: datetime | None = None
    for t, raw in zip(series.times, series.values, strict=True):
        if previous is not None and gap_s and (t - previous).total_seconds() > gap_s:
            xs.append(plotly_time(previous + (t - previous) / 2))
            ys.append(None)
        xs.append(plotly_time(t))
        ys.append(None if raw is None else raw * scale)
        previous = t
    return xs, ys


def _trace(name: str, uid: str, xs: list[str], ys: list[float | None], spec: ChartSpec) -> dict:
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "marker": {"size": 3},
        "uid": uid,
        "name": name,
        "x": xs,
        "y": ys,
        "connectgaps": False,
        "line": {"width": 1.5},
        "hovertemplate": f"%{{y:.{spec.digits}f}} {spec.unit}<extra>{name}</extra>",
    }


def rest_name(spec: ChartSpec, count: int) -> str:
    """The summary line's legend entry: ``mean of 990 others`` / ``sum of 12 others``."""
    return f"{spec.rest} of {count} other{'s' if count != 1 else ''}"


def traces(spec: ChartSpec, data: ChartData) -> list[dict[str, Any]]:
    """One trace per top series (highest measure first), then the rest's summary (dashed, grey).
    A ``None`` is put in every gap wider than 2.5 × the larger of the bucket and the series'
    typical spacing (:func:`app.fleet.charts.gap_threshold_s`), so an outage or a counter reset
    shows as a break while host readings sent once a minute still draw a line in 15-s buckets;
    small markers keep a point between two breaks visible."""
    out = []
    for s in data.top:
        name = html.escape(s.name)
        gap_s = gap_threshold_s(s.times, data.step_s)
        out.append(_trace(name, f"{s.hostname}\x1f{s.item}", *_points(s, spec.scale, gap_s), spec))
    if data.rest is not None and data.rest_count:
        gap_s = gap_threshold_s(data.rest.times, data.step_s)
        rest = _trace(
            rest_name(spec, data.rest_count), "rest", *_points(data.rest, spec.scale, gap_s), spec
        )
        rest["line"] = {"width": 2, "dash": "dash", "color": REST_COLOR}
        out.append(rest)
    return out


def build_figure(spec: ChartSpec, data: ChartData) -> dict[str, Any]:
    """``{"id", "metric", "title", "meta", "figure": {"data", "layout"}}`` for one chart."""
    title = f"{spec.title} ({spec.unit})"
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 14}},
        "xaxis": {
            "title": {"text": "Time (UTC)"},
            "type": "date",
            "range": [plotly_time(data.start), plotly_time(data.end)],
            "automargin": True,
        },
        "yaxis": {
            "title": {"text": spec.unit},
            "rangemode": "tozero",
            "zeroline": False,
            "automargin": True,
        },
        "height": 300,
        "margin": {"l": 56, "r": 8, "t": 36, "b": 40},
        "hovermode": "closest",
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25, "font": {"size": 11}},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "uirevision": spec.metric,
    }
    if data.empty:
        layout["annotations"] = [EMPTY_NOTE]
    return {
        "id": f"chart-{spec.metric}",
        "metric": spec.metric,
        "title": title,
        "meta": {"metric": spec.metric, "scale": spec.scale, "unit": spec.unit},
        "figure": {"data": traces(spec, data), "layout": layout},
    }
