"""Node-page charts: the time range picked in the URL, and samples → Plotly figure dicts.

:func:`build_figures` is pure (a :class:`~app.fleet.schemas.SamplesOut` in, JSON-ready dicts out)
so it is tested without a browser. The page embeds its output as the first paint; on refresh
``static/js/charts.js`` fetches the same samples from ``/api/v1/nodes/{hostname}/samples`` and
rebuilds only the traces, following each figure's ``meta`` (metric, scale, gap), so the two stay
in step: keep :func:`_trace` and ``tracesFrom`` in ``charts.js`` alike.
"""

from __future__ import annotations

import functools
import itertools
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from app.config import Settings
from app.errors import BadRequest
from app.fleet.chart_marks import ChartMark, mark_shapes, mark_trace
from app.fleet.schemas import SamplesOut, SeriesOut
from app.metrics.service import choose_step_s
from app.timebounds import checked_utc, is_utc

PRESETS: dict[str, timedelta] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
DEFAULT_PRESET = "1h"
MAX_RANGE = timedelta(days=31)


@dataclass(frozen=True)
class ChartSpec:
    """One chart: the metric it plots, its title, the axis unit and the factor from the stored
    unit to the displayed one (bytes → GiB)."""

    metric: str
    title: str
    unit: str
    scale: float = 1.0
    y_max: float | None = None


CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("util_gpu_pct", "GPU utilization", "%", y_max=100),
    ChartSpec("mem_used_bytes", "Memory used", "GiB", scale=1 / 2**30),
    ChartSpec("power_w", "Power draw", "W"),
    ChartSpec("temp_c", "GPU temperature", "°C"),
)
CHART_METRICS: tuple[str, ...] = tuple(c.metric for c in CHARTS)
EMPTY_NOTE: dict[str, Any] = {
    "text": "No samples in this range",
    "xref": "paper",
    "yref": "paper",
    "x": 0.5,
    "y": 0.5,
    "showarrow": False,
}


@dataclass(frozen=True)
class ChartRange:
    """The charted window. ``preset`` is set for the rolling ranges (``live``: they slide with
    time and are refreshed); a custom ``start``/``end`` window is fixed."""

    start: datetime
    end: datetime
    preset: str | None
    step_s: int

    @property
    def live(self) -> bool:
        """True for a rolling window ending now."""
        return self.preset is not None

    @property
    def span_s(self) -> int:
        """Width of the window in seconds."""
        return int((self.end - self.start).total_seconds())


def _parse_time(name: str, raw: str, zone: tzinfo = UTC) -> datetime:
    """RFC 3339, or an HTML ``datetime-local`` value (no offset): wall time in ``zone``, the
    viewer's zone the page labels the inputs with (the first of a repeated hour; a skipped
    wall time moves forward by the DST jump)."""
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{name}: not a time: {raw!r} (use YYYY-MM-DDTHH:MM)") from None
    try:
        return checked_utc(value.replace(tzinfo=zone) if value.tzinfo is None else value)
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}: {raw!r}") from None


def raw_from(settings: Settings, now: datetime) -> datetime:
    """The oldest raw sample kept at ``now``: ``now`` minus ``raw_retention_days``."""
    return now - timedelta(days=settings.raw_retention_days)


def to_whole_minutes(
    start: datetime, end: datetime, raw_from: datetime | None
) -> tuple[datetime, datetime]:
    """``[start, end]`` widened to whole minutes where it lies before ``raw_from``: there only
    the 1-minute rollups are left, and a part of a minute would be read from raw rows that
    retention has pruned (the edge minute would be missing)."""
    if raw_from is None:
        return start, end
    if start < raw_from:
        start = start.replace(second=0, microsecond=0)
    if end < raw_from and (end.second or end.microsecond):
        end = end.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return start, end


def resolve_chart_range(
    *,
    preset: str | None,
    start: str | None,
    end: str | None,
    now: datetime,
    zone: tzinfo = UTC,
    raw_from: datetime | None = None,
) -> ChartRange:
    """The window asked for by ``?range=1h`` or ``?start=…&end=…`` (``end`` defaults to now;
    times without an offset are wall times in ``zone``); neither gives the last hour. Its step
    is :func:`~app.metrics.service.choose_step_s`'s (``raw_from``: the oldest raw sample kept,
    :func:`raw_from`).

    Raises:
        BadRequest: an unknown preset, a time that does not parse, start not before end, or a
            window longer than 31 days.
    """
    if start:
        t1 = _parse_time("end", end, zone) if end else now
        t0 = _parse_time("start", start, zone)
        if t0 >= t1:
            raise BadRequest("start must be before end")
        if t1 - t0 > MAX_RANGE:
            raise BadRequest("the range may not exceed 31 days")
        t0, t1 = to_whole_minutes(t0, t1, raw_from)
        return ChartRange(t0, t1, None, choose_step_s(t0, t1, raw_from=raw_from))
    name = preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise BadRequest(f"unknown range {name!r}; one of {', '.join(PRESETS)}")
    t0 = now - PRESETS[name]
    t0, _ = to_whole_minutes(t0, now, raw_from)
    return ChartRange(t0, now, name, choose_step_s(t0, now, raw_from=raw_from))


def plotly_time(value: datetime, zone: tzinfo = UTC) -> str:
    """``value`` as a Plotly x value on the wall clock of ``zone``. Plotly draws the wall time
    and ignores an offset, so UTC is written without one (``2026-03-29 01:30:00``) and other
    zones as ISO 8601 with theirs (``2026-03-29T03:30:00+02:00``), which keeps the value
    unambiguous in the repeated hour when DST ends."""
    if is_utc(zone):
        text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        return f"{text}.{value.microsecond:06d}" if value.microsecond else text
    return value.astimezone(zone).isoformat()


def local_input(value: datetime, zone: tzinfo = UTC) -> str:
    """A ``datetime-local`` input value: the wall time in ``zone`` to the minute."""
    return value.astimezone(zone).strftime("%Y-%m-%dT%H:%M")


def zone_name(zone: tzinfo) -> str:
    """The IANA name of ``zone`` (``Europe/Berlin``), ``UTC`` for UTC."""
    return "UTC" if is_utc(zone) else str(zone)


def gap_threshold_s(times: list[datetime], step_s: int) -> float:
    """Spacing above which two neighbouring points are not joined: 2.5 × the larger of the step
    and the points' median spacing, so an outage shows as a gap while an agent sampling less
    often than the step (every 30 s in 10-s buckets: every third bucket filled) still draws a
    line instead of isolated, invisible points."""
    spacings = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    # The lower median: with few points (three buckets, one gap) the gap is not "typical".
    typical = statistics.median_low(spacings) if spacings else 0.0
    return 2.5 * max(float(step_s), typical)


def _wall(value: datetime, zone: tzinfo) -> datetime:
    return value.astimezone(zone).replace(tzinfo=None)


def _trace(
    series: SeriesOut,
    spec: ChartSpec,
    gap_s: float,
    zone: tzinfo = UTC,
    times: dict[datetime, str] | None = None,
) -> dict[str, Any]:
    """One line per GPU; a ``None`` is put in every gap wider than ``gap_s``, and where the wall
    clock of ``zone`` goes back (DST ends) so the repeated hour is not joined backwards; nulls
    stay nulls. ``times`` caches :func:`plotly_time` across the traces of one response (every
    GPU and chart shares the sample times: 11,520 points for an hour of 8 GPUs × 4 charts)."""
    cache: dict[datetime, str] = {} if times is None else times
    utc = is_utc(zone)

    def x(value: datetime) -> str:
        text = cache.get(value)
        if text is None:
            text = cache[value] = plotly_time(value, zone)
        return text

    xs: list[str] = []
    ys: list[float | None] = []
    previous: datetime | None = None
    for t, raw in zip(series.t, series.values.get(spec.metric, []), strict=False):
        if previous is not None and gap_s and (t - previous).total_seconds() > gap_s:
            xs.append(x(previous + (t - previous) / 2))
            ys.append(None)
        elif previous is not None and not utc and _wall(t, zone) < _wall(previous, zone):
            xs.append(x(t))
            ys.append(None)
        xs.append(x(t))
        ys.append(None if raw is None else float(raw) * spec.scale)
        previous = t
    return {
        "type": "scatter",
        "mode": "lines",
        "uid": series.gpu_uuid,
        "name": f"GPU {series.gpu_index}",
        "x": xs,
        "y": ys,
        "connectgaps": False,
        "line": {"width": 1.5},
        "hovertemplate": f"%{{y:.1f}} {spec.unit}<extra>GPU {series.gpu_index}</extra>",
    }


def _layout(
    spec: ChartSpec, samples: SamplesOut, zone: tzinfo, marks: list[ChartMark]
) -> dict[str, Any]:
    yaxis: dict[str, Any] = {
        "title": {"text": spec.unit},
        "rangemode": "tozero",
        "zeroline": False,
        "automargin": True,
    }
    if spec.y_max is not None:
        yaxis["range"] = [0, spec.y_max * 1.02]
    layout: dict[str, Any] = {
        "title": {"text": f"{spec.title} ({spec.unit})", "x": 0.01, "font": {"size": 14}},
        "xaxis": {
            "title": {"text": f"Time ({zone_name(zone)})"},
            "type": "date",
            "range": [plotly_time(samples.start, zone), plotly_time(samples.end, zone)],
            "automargin": True,
        },
        "yaxis": yaxis,
        "height": 280,
        "margin": {"l": 56, "r": 8, "t": 36, "b": 40},
        "hovermode": "x unified",
        "showlegend": True,
        "legend": {"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "uirevision": spec.metric,
    }
    if marks:
        layout["shapes"] = mark_shapes(marks, lambda t: plotly_time(t, zone))
        layout["yaxis2"] = {
            "overlaying": "y",
            "range": [0, 1],
            "visible": False,
            "fixedrange": True,
        }
    if not any(s.t for s in samples.series):
        layout["annotations"] = [EMPTY_NOTE]
    return layout


def build_figures(
    samples: SamplesOut, *, zone: tzinfo = UTC, marks: Iterable[ChartMark] = ()
) -> list[dict[str, Any]]:
    """One figure per chart metric, one trace per GPU (ordered by GPU index), times on the wall
    clock of ``zone`` (the viewer's), ``marks`` (events, see :mod:`app.fleet.chart_marks`) as
    vertical lines plus a last ``Events`` marker trace with their hover text.

    Each item is ``{"id", "metric", "title", "meta", "overlay", "figure": {"data", "layout"}}``;
    ``meta`` carries what ``charts.js`` needs to rebuild the GPU traces from a later samples
    response; ``overlay`` holds the traces drawn after them (the events' hover markers), kept
    apart so a refresh rebuilds ``data`` alone. The event lines are in ``layout.shapes``.
    """
    in_range = [m for m in marks if samples.start <= m.at <= samples.end]
    to_x = functools.partial(plotly_time, zone=zone)
    overlay = [mark_trace(in_range, to_x, zone)] if in_range else []
    series = sorted(samples.series, key=lambda s: s.gpu_index)
    gaps = {s.gpu_uuid: gap_threshold_s(list(s.t), samples.step_s) for s in series}
    times: dict[datetime, str] = {}
    figures = []
    for spec in CHARTS:
        figures.append(
            {
                "id": f"chart-{spec.metric}",
                "metric": spec.metric,
                "title": f"{spec.title} ({spec.unit})",
                "meta": {
                    "metric": spec.metric,
                    "scale": spec.scale,
                    "unit": spec.unit,
                    "empty_note": EMPTY_NOTE,
                    "tz": zone_name(zone),
                },
                "overlay": overlay,
                "figure": {
                    "data": [_trace(s, spec, gaps[s.gpu_uuid], zone, times) for s in series],
                    "layout": _layout(spec, samples, zone, in_range),
                },
            }
        )
    return figures


def build_metric_figure(
    samples: SamplesOut,
    spec: ChartSpec,
    *,
    zone: tzinfo = UTC,
    threshold: float | None = None,
    at: datetime | None = None,
) -> dict[str, Any]:
    """One figure of ``spec``'s metric for the GPUs of ``samples`` (the alert page's chart), as
    :func:`build_figures` items are, with the rule's ``threshold`` as a dashed horizontal line
    (in the stored unit) and ``at`` (when the alert became active) as a vertical one."""
    series = sorted(samples.series, key=lambda s: s.gpu_index)
    gaps = {s.gpu_uuid: gap_threshold_s(list(s.t), samples.step_s) for s in series}
    times: dict[datetime, str] = {}
    layout = _layout(spec, samples, zone, [])
    shapes: list[dict[str, Any]] = []
    if threshold is not None:
        y = threshold * spec.scale
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "y0": y,
                "y1": y,
                "line": {"dash": "dash", "width": 1, "color": "#c0392b"},
            }
        )
    if at is not None and samples.start <= at <= samples.end:
        x = plotly_time(at, zone)
        shapes.append(
            {
                "type": "line",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "width": 1, "color": "#c0392b"},
            }
        )
    layout["shapes"] = shapes
    layout.pop("uirevision", None)
    return {
        "id": f"alert-chart-{spec.metric}",
        "metric": spec.metric,
        "title": f"{spec.title} ({spec.unit})",
        "meta": {
            "metric": spec.metric,
            "scale": spec.scale,
            "unit": spec.unit,
            "empty_note": EMPTY_NOTE,
            "tz": zone_name(zone),
        },
        "overlay": [],
        "figure": {
            "data": [_trace(s, spec, gaps[s.gpu_uuid], zone, times) for s in series],
            "layout": layout,
        },
    }
