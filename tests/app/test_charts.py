"""The node-page charts, without a browser: time ranges and samples → Plotly figure dicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from app.errors import BadRequest
from app.events.models import NodeEvent
from app.fleet.chart_marks import ChartMark, dst_marks, event_mark, event_style
from app.fleet.charts import (
    CHART_METRICS,
    build_figures,
    gap_threshold_s,
    local_input,
    plotly_time,
    resolve_chart_range,
)
from app.fleet.schemas import SamplesOut, SeriesOut

T0 = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)


def series(index: int, values: dict[str, list[Any]], *, step_s: int = 60) -> SeriesOut:
    count = len(next(iter(values.values())))
    return SeriesOut(
        gpu_uuid=f"GPU-{index}",
        gpu_index=index,
        gpu_name="NVIDIA H100 80GB HBM3",
        t=[T0 + timedelta(seconds=i * step_s) for i in range(count)],
        values=values,
    )


def samples(*gpus: SeriesOut, step_s: int = 60) -> SamplesOut:
    return SamplesOut(
        hostname="node-a",
        start=T0,
        end=T0 + timedelta(hours=1),
        step_s=step_s,
        metrics=list(CHART_METRICS),
        series=list(gpus),
    )


def by_metric(result: SamplesOut) -> dict[str, dict[str, Any]]:
    return {f["metric"]: f for f in build_figures(result)}


def test_it_draws_one_figure_per_chart_metric_and_one_trace_per_gpu_in_index_order() -> None:
    values = {m: [1, 2, 3] for m in CHART_METRICS}
    figures = build_figures(samples(series(1, values), series(0, values), series(2, values)))

    assert [f["metric"] for f in figures] == list(CHART_METRICS)
    for figure in figures:
        traces = figure["figure"]["data"]
        assert [t["name"] for t in traces] == ["GPU 0", "GPU 1", "GPU 2"]
        assert [t["uid"] for t in traces] == ["GPU-0", "GPU-1", "GPU-2"]


def test_it_keeps_nulls_as_none_and_never_joins_them() -> None:
    values = {m: [50, None, 70] for m in CHART_METRICS}
    util = by_metric(samples(series(0, values)))["util_gpu_pct"]["figure"]["data"][0]

    assert util["y"] == [50.0, None, 70.0]
    assert util["connectgaps"] is False


def test_it_titles_axes_with_units_and_utc() -> None:
    values = {m: [1] for m in CHART_METRICS}
    figures = by_metric(samples(series(0, values)))

    units = {m: f["figure"]["layout"]["yaxis"]["title"]["text"] for m, f in figures.items()}
    assert units == {"util_gpu_pct": "%", "mem_used_bytes": "GiB", "power_w": "W", "temp_c": "°C"}
    for figure in figures.values():
        layout = figure["figure"]["layout"]
        assert layout["xaxis"]["title"]["text"] == "Time (UTC)"
        assert layout["xaxis"]["range"] == ["2026-11-29 16:00:00", "2026-11-29 17:00:00"]
        assert figure["meta"]["unit"] in layout["title"]["text"]


def test_it_shows_memory_in_gib() -> None:
    values = {m: [80 * 2**30] for m in CHART_METRICS}
    memory = by_metric(samples(series(0, values)))["mem_used_bytes"]["figure"]["data"][0]

    assert memory["y"] == [80.0]


def test_it_breaks_the_line_where_buckets_are_missing() -> None:
    gpu = SeriesOut(
        gpu_uuid="GPU-0",
        gpu_index=0,
        gpu_name=None,
        t=[T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=10)],
        values={m: [1, 2, 3] for m in CHART_METRICS},
    )
    trace = by_metric(samples(gpu, step_s=60))["temp_c"]["figure"]["data"][0]

    assert trace["y"] == [1.0, 2.0, None, 3.0]
    assert trace["x"][2] == "2026-11-29 16:05:30"


def test_raw_samples_gap_follows_the_agents_interval() -> None:
    times = [T0 + timedelta(seconds=s) for s in (0, 5, 10, 15, 60)]

    assert gap_threshold_s(times, 0) == 12.5
    assert gap_threshold_s(times, 30) == 75
    assert gap_threshold_s(times[:1], 0) == 0


def test_an_agent_sampling_less_often_than_the_step_still_draws_a_line() -> None:
    # 30-s samples in 10-s buckets (a 1-h chart): every third bucket holds a point. A 25-s
    # threshold put a gap between every pair and Plotly drew nothing (found by a break test).
    times = [T0 + timedelta(seconds=s) for s in range(0, 600, 30)]
    assert gap_threshold_s(times, 10) == 75
    times_with_outage = [*times, T0 + timedelta(seconds=900)]
    assert (times_with_outage[-1] - times_with_outage[-2]).total_seconds() > gap_threshold_s(
        times_with_outage, 10
    )


def test_an_empty_range_says_so() -> None:
    figure = build_figures(samples(series(0, {m: [] for m in CHART_METRICS})))[0]

    assert figure["figure"]["data"][0]["y"] == []
    assert figure["figure"]["layout"]["annotations"][0]["text"] == "No samples in this range"


def test_plotly_times_are_utc_wall_times_without_a_zone() -> None:
    paris = timezone(timedelta(hours=1))

    assert plotly_time(T0) == "2026-11-29 16:00:00"
    assert plotly_time(datetime(2026, 11, 29, 17, 0, 5, 250000, paris)) == (
        "2026-11-29 16:00:05.250000"
    )


@pytest.mark.parametrize(
    ("preset", "span", "step_s"),
    [
        ("15m", timedelta(minutes=15), 0),
        ("1h", timedelta(hours=1), 10),
        ("30d", timedelta(30), 7200),
    ],
)
def test_presets_are_rolling_windows_ending_now(preset: str, span: timedelta, step_s: int) -> None:
    window = resolve_chart_range(preset=preset, start=None, end=None, now=NOW)

    assert (window.start, window.end, window.step_s) == (NOW - span, NOW, step_s)
    assert window.live and window.preset == preset


def test_no_range_means_the_last_hour() -> None:
    window = resolve_chart_range(preset=None, start=None, end=None, now=NOW)

    assert window.preset == "1h" and window.span_s == 3600


def test_a_custom_range_is_fixed_and_reads_datetime_local_values_as_utc() -> None:
    window = resolve_chart_range(
        preset="1h", start="2026-11-28T10:00", end="2026-11-28T14:00+02:00", now=NOW
    )

    assert window.start == datetime(2026, 11, 28, 10, 0, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    assert window.step_s == 30
    assert not window.live


@pytest.mark.parametrize(
    ("preset", "start", "end", "message"),
    [
        ("2y", None, None, "unknown range"),
        (None, "yesterday", None, "not a time"),
        (None, "2026-11-29T12:00Z", "2026-11-29T11:00Z", "before"),
        (None, "2026-10-01T00:00Z", "2026-11-29T00:00Z", "31 days"),
    ],
)
def test_bad_ranges_are_refused(
    preset: str | None, start: str | None, end: str | None, message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        resolve_chart_range(preset=preset, start=start, end=end, now=NOW)


# --- the viewer's time zone and event marks -------------------------------------------------

BERLIN = ZoneInfo("Europe/Berlin")
FALL_BACK = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)  # 03:00 CEST → 02:00 CET


def fall_back_samples() -> SamplesOut:
    """Raw samples every 10 min of GPU 0 across Berlin's fall-back hour."""
    times = [FALL_BACK + timedelta(minutes=m) for m in (-20, -10, 0, 10)]
    return SamplesOut(
        hostname="node-a",
        start=FALL_BACK - timedelta(hours=1),
        end=FALL_BACK + timedelta(hours=1),
        step_s=0,
        metrics=list(CHART_METRICS),
        series=[
            SeriesOut(
                gpu_uuid="GPU-0",
                gpu_index=0,
                gpu_name=None,
                t=times,
                values={m: [1, 2, 3, 4] for m in CHART_METRICS},
            )
        ],
    )


def test_plotly_times_in_another_zone_are_iso_8601_with_the_offset() -> None:
    at = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert plotly_time(at, BERLIN) == "2026-03-29T03:30:00+02:00"
    assert plotly_time(at - timedelta(hours=1), BERLIN) == "2026-03-29T01:30:00+01:00"
    assert plotly_time(at, ZoneInfo("Asia/Kolkata")) == "2026-03-29T07:00:00+05:30"
    assert plotly_time(at, ZoneInfo("UTC")) == "2026-03-29 01:30:00"


def test_the_repeated_hour_is_drawn_in_wall_time_without_joining_it_backwards() -> None:
    figure = build_figures(fall_back_samples(), zone=BERLIN)[0]
    trace = figure["figure"]["data"][0]
    assert trace["x"] == [
        "2026-10-25T02:40:00+02:00",
        "2026-10-25T02:50:00+02:00",
        "2026-10-25T02:00:00+01:00",  # the break: the wall clock went back an hour
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:10:00+01:00",
    ]
    assert trace["y"] == [1.0, 2.0, None, 3.0, 4.0]
    layout = figure["figure"]["layout"]
    assert layout["xaxis"]["title"]["text"] == "Time (Europe/Berlin)"
    assert layout["xaxis"]["range"] == ["2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"]
    assert figure["meta"]["tz"] == "Europe/Berlin"


def test_events_in_range_become_lines_and_hover_markers_out_of_range_ones_do_not() -> None:
    marks = [
        ChartMark(FALL_BACK + timedelta(minutes=5), "xid", "Xid 79 · GPU 0: fallen off the bus"),
        ChartMark(FALL_BACK - timedelta(minutes=30), "topology", "Topology change"),
        ChartMark(FALL_BACK + timedelta(hours=2), "throttling", "outside the range"),
        *dst_marks(FALL_BACK - timedelta(hours=1), FALL_BACK + timedelta(hours=1), BERLIN),
    ]
    figure = build_figures(fall_back_samples(), zone=BERLIN, marks=marks)[0]
    assert [t["name"] for t in figure["figure"]["data"]] == ["GPU 0"]
    [overlay] = figure["overlay"]
    assert overlay["yaxis"] == "y2"
    assert overlay["x"] == [
        "2026-10-25T02:05:00+01:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:00:00+01:00",
    ]
    assert overlay["text"] == [
        "2026-10-25 02:05:00 CET · Xid 79 · GPU 0: fallen off the bus",
        "2026-10-25 02:30:00 CEST · Topology change",
        "2026-10-25 02:00:00 CET · UTC offset change: UTC+02:00 → UTC+01:00",
    ]
    assert overlay["marker"]["symbol"] == ["x", "square", "circle-open"]
    shapes = figure["figure"]["layout"]["shapes"]
    assert [(s["x0"], s["line"]["color"], s["line"]["dash"]) for s in shapes] == [
        ("2026-10-25T02:05:00+01:00", "#d62728", "solid"),
        ("2026-10-25T02:30:00+02:00", "#1f77b4", "dashdot"),
        ("2026-10-25T02:00:00+01:00", "#7f7f7f", "longdash"),
    ]
    assert all(s["yref"] == "paper" and (s["y0"], s["y1"]) == (0, 1) for s in shapes)
    assert build_figures(fall_back_samples())[0]["overlay"] == []


def test_dst_marks_name_the_offsets_either_side() -> None:
    spring = datetime(2026, 3, 29, tzinfo=UTC)
    assert dst_marks(spring, spring + timedelta(days=1), BERLIN) == [
        ChartMark(
            datetime(2026, 3, 29, 1, tzinfo=UTC), "dst", "UTC offset change: UTC+01:00 → UTC+02:00"
        )
    ]
    assert dst_marks(spring, spring + timedelta(days=1), ZoneInfo("Asia/Kolkata")) == []


@pytest.mark.parametrize(
    ("kind", "style"),
    [
        ("xid", "xid"),
        ("gpu_lost", "gpu_lost"),
        ("gpu_fallen_off_bus", "gpu_lost"),
        ("hw_thermal_slowdown", "throttling"),
        ("throttling", "throttling"),
        ("clocks_event_reasons", "throttling"),
        ("ecc_dbe", "other"),
    ],
)
def test_event_kinds_map_to_mark_styles(kind: str, style: str) -> None:
    assert event_style(kind) == style


def test_an_event_row_reads_as_kind_gpu_and_message() -> None:
    at = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    xid = NodeEvent(occurred_at=at, kind="xid", xid=79, gpu_id=7, message=" fell off ")
    assert event_mark(xid, {7: 3}) == ChartMark(at, "xid", "Xid 79 · GPU 3: fell off")
    lost = NodeEvent(occurred_at=at, kind="gpu_lost", pci_bus_id="00000000:3B:00.0")
    assert event_mark(lost, {}).text == "GPU lost · 00000000:3B:00.0"
    other = NodeEvent(occurred_at=at, kind="ecc_dbe", gpu_id=7)
    assert event_mark(other, {7: 0}).text == "ecc_dbe · GPU 0"


def test_custom_range_inputs_are_wall_times_in_the_viewer_zone() -> None:
    window = resolve_chart_range(
        preset=None, start="2026-03-29T01:30", end="2026-03-29T03:30", now=NOW, zone=BERLIN
    )
    assert (window.start, window.end) == (
        datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
    )
    # The first 02:30 of the fall-back night (CEST) is meant.
    ambiguous = resolve_chart_range(
        preset=None, start="2026-10-25T02:30", end="2026-10-25T04:00", now=NOW, zone=BERLIN
    )
    assert ambiguous.start == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert local_input(ambiguous.start, BERLIN) == "2026-10-25T02:30"
