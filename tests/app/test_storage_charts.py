"""Pure parts of the fleet storage page: counter increases (resets and 64-bit rollover as gaps),
top N and the rest summary, and ChartData → Plotly figure dicts, with exact values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.errors import BadRequest
from app.storage import charts, counters
from app.storage.series import ChartData, Series, pick_top, rest_means, rest_sums

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_increases_are_differences_and_a_reset_is_a_gap_not_a_negative() -> None:
    got = counters.increases([(at(0), 10), (at(15), 15), (at(30), 3), (at(45), 7)])
    assert [i.value for i in got] == [5, None, 4]
    assert [i.per_s for i in got] == [5 / 15, None, 4 / 15]
    assert counters.total(got) == 9
    assert counters.gaps(got) == 1


def test_a_64_bit_rollover_is_a_gap_not_a_huge_spike() -> None:
    top = counters.U64_MAX
    got = counters.increases([(at(0), top - 5), (at(10), top), (at(20), 2), (at(30), 12)])
    assert [i.value for i in got] == [5, None, 10]
    assert counters.total(got) == 15
    # exact above 2**63: no float rounding in the difference
    assert counters.increase(2**64 - 1000, 2**64 - 1) == 999


def test_missing_readings_and_zero_length_intervals() -> None:
    assert counters.increase(None, 5) is None
    assert counters.increase(5, None) is None
    assert counters.increase(5, 5) == 0
    assert counters.Increase(at(0), at(0), 3).per_s is None
    assert counters.increases([(at(0), 1)]) == []


def test_summed_increases_add_the_known_counters_and_gap_only_when_all_are() -> None:
    a = counters.increases([(at(0), 0), (at(10), 2), (at(20), 1)])
    b = counters.increases([(at(0), 5), (at(10), 5), (at(20), 8)])
    c = counters.increases([(at(0), None), (at(10), 1), (at(20), 0)])
    summed = counters.summed_increases([a, b, c])
    assert [i.value for i in summed] == [2, 3]
    both_reset = counters.summed_increases([counters.increases([(at(0), 9), (at(10), 0)])] * 2)
    assert [i.value for i in both_reset] == [None]
    with pytest.raises(ValueError, match="same times"):
        counters.summed_increases([a, a[:1]])
    assert counters.summed_increases([]) == []


def test_pick_top_highest_first_ties_by_key_none_last() -> None:
    measures = {(1, "b"): 5.0, (2, "a"): 5.0, (3, "x"): 9.0, (4, "y"): None, (5, "z"): 0.0}
    assert pick_top(measures, 3) == [(3, "x"), (1, "b"), (2, "a")]
    assert pick_top(measures, 10)[-1] == (4, "y")
    assert pick_top(measures, 0) == []
    with pytest.raises(ValueError):
        pick_top(measures, -1)


def test_rest_means_subtract_the_top_series_from_the_bucket_sums() -> None:
    all_buckets = {at(0): (10.0, 4), at(15): (6.0, 2), at(30): (3.0, 1)}
    top = [{at(0): (4.0, 1), at(30): (3.0, 1)}, {at(0): (2.0, 1), at(15): (1.0, 1)}]
    assert rest_means(all_buckets, top) == [(at(0), 2.0), (at(15), 5.0)]


def test_rest_sums_skip_nones() -> None:
    a = Series("n1", "/a", [at(0), at(15)], [1.0, None])
    b = Series("n2", "/b", [at(15), at(30)], [2.0, 4.0])
    assert rest_sums([a, b]) == [(at(0), 1.0), (at(15), 2.0), (at(30), 4.0)]


def _data(**over: object) -> ChartData:
    values: dict[str, object] = {
        "metric": "disk_read_bytes_per_s",
        "start": at(0),
        "end": at(600),
        "step_s": 15,
        "top": [
            Series("gpu-1", "nvme0n1", [at(0), at(15), at(60)], [2**20, None, 3 * 2**20], 2.0),
        ],
        "rest": Series("", "", [at(0)], [2**19]),
        "rest_count": 4,
    }
    values.update(over)
    return ChartData(**values)  # type: ignore[arg-type]


def test_build_figure_scales_breaks_gaps_and_summarises_the_rest() -> None:
    spec = charts.CHARTS_BY_METRIC["disk_read_bytes_per_s"]
    figure = charts.build_figure(spec, _data())
    assert figure["id"] == "chart-disk_read_bytes_per_s"
    assert figure["title"] == "Disk read (MiB/s)"
    line, rest = figure["figure"]["data"]
    assert line["name"] == "gpu-1 nvme0n1"
    assert (line["mode"], line["marker"]) == ("lines+markers", {"size": 3})
    # 45 s between 15 and 60 exceeds 2.5 × 15 s: a None at the midpoint breaks the line
    assert line["x"] == [
        "2026-11-29 12:00:00",
        "2026-11-29 12:00:15",
        "2026-11-29 12:00:37.500000",
        "2026-11-29 12:01:00",
    ]
    assert line["y"] == [1.0, None, None, 3.0]
    assert line["hovertemplate"] == "%{y:.1f} MiB/s<extra>gpu-1 nvme0n1</extra>"
    assert rest["name"] == "mean of 4 others"
    assert rest["y"] == [0.5]
    assert rest["line"] == {"width": 2, "dash": "dash", "color": "#888888"}
    layout = figure["figure"]["layout"]
    assert layout["xaxis"]["range"] == ["2026-11-29 12:00:00", "2026-11-29 12:10:00"]
    assert "annotations" not in layout


def test_readings_a_minute_apart_draw_a_line_in_15_s_buckets_and_an_outage_still_breaks() -> None:
    # The agent sends host readings once a minute (--host-interval 60): on the 1-h range's
    # 15-s buckets every point stood alone between two breaks.
    spec = charts.CHARTS_BY_METRIC["disk_read_bytes_per_s"]
    times = [at(60 * i) for i in (0, 1, 2, 3, 9, 10)]  # 6 minutes without data before 9
    top = [Series("gpu-1", "nvme0n1", times, [float(2**20)] * 6, 1.0)]
    line, _ = charts.build_figure(spec, _data(top=top))["figure"]["data"]
    assert line["y"] == [1.0, 1.0, 1.0, 1.0, None, 1.0, 1.0]


def test_counter_figure_sums_the_rest_and_names_one_other() -> None:
    spec = charts.CHARTS_BY_METRIC["nfs_retransmits"]
    data = _data(metric="nfs_retransmits", rest=Series("", "", [at(0)], [7.0]), rest_count=1)
    _, rest = charts.build_figure(spec, data)["figure"]["data"]
    assert rest["name"] == "sum of 1 other"
    assert rest["y"] == [7.0]


def test_hostile_names_are_escaped_in_the_legend() -> None:
    spec = charts.CHARTS_BY_METRIC["nfs_avg_rtt_s"]
    hostile = Series("n<1>", "/mnt/<b>x</b>&'", [at(0)], [0.25], 0.25)
    figure = charts.build_figure(spec, _data(top=[hostile], rest=None, rest_count=0))
    (trace,) = figure["figure"]["data"]
    assert trace["name"] == "n&lt;1&gt; /mnt/&lt;b&gt;x&lt;/b&gt;&amp;&#x27;"
    assert trace["y"] == [250.0]


def test_no_data_gives_no_traces_and_the_empty_note() -> None:
    spec = charts.CHARTS_BY_METRIC["ib_errors"]
    figure = charts.build_figure(spec, _data(top=[], rest=None, rest_count=0))
    assert figure["figure"]["data"] == []
    assert figure["figure"]["layout"]["annotations"][0]["text"] == "No samples in this range"


def test_range_resolution_has_a_15_s_floor_and_names_bad_input() -> None:
    now = at(3600)
    assert charts.resolve_range(preset="15m", start=None, end=None, now=now).step_s == 15
    assert charts.resolve_range(preset="30d", start=None, end=None, now=now).step_s == 7200
    custom = charts.resolve_range(preset=None, start="2026-11-29T11:00", end=None, now=now)
    assert (custom.start, custom.end, custom.live) == (at(-3600), now, False)
    with pytest.raises(BadRequest, match="unknown range"):
        charts.resolve_range(preset="2y", start=None, end=None, now=now)
    with pytest.raises(BadRequest, match="start"):
        charts.resolve_range(preset=None, start="yesterday", end=None, now=now)
