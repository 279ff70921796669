"""The GPU page's pure parts without a server: figures, ECC counter increases, and which GPU an
index or UUID names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.errors import NotFound
from app.fleet.chart_marks import ChartMark
from app.fleet.models import Gpu, Node
from app.fleet.schemas import SamplesOut, SeriesOut
from app.fleet.service import GpuView, NodeView
from app.gpus.charts import GPU_CHART_METRICS, GPU_CHARTS, build_gpu_figures, counter_increases
from app.gpus.service import resolve_gpu

T0 = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)


def one_gpu(values: dict[str, list[float | int | None]], *, points: int = 3) -> SamplesOut:
    return SamplesOut(
        hostname="node-a",
        start=T0,
        end=T0 + timedelta(minutes=10),
        step_s=0,
        metrics=list(values),
        series=[
            SeriesOut(
                gpu_uuid="GPU-1",
                gpu_index=1,
                gpu_name="NVIDIA H100 80GB HBM3",
                t=[T0 + timedelta(seconds=10 * i) for i in range(points)],
                values=values,
            )
        ],
    )


def test_one_figure_per_gpu_chart_with_the_gpus_values_scaled_to_the_axis_unit() -> None:
    samples = one_gpu(
        {
            "util_gpu_pct": [10, None, 30],
            "pcie_tx_bytes_per_s": [2**20, 3 * 2**20, 0],
            "nvlink_rx_bytes_per_s": [2**30, 2**31, None],
            "ecc_uncorrected_volatile_count": [0, 1, 1],
        }
    )

    figures = {f["metric"]: f for f in build_gpu_figures(samples)}

    assert list(figures) == [spec.metric for spec in GPU_CHARTS]
    assert list(figures)[:4] == ["util_gpu_pct", "mem_used_bytes", "power_w", "temp_c"]
    assert figures["util_gpu_pct"]["figure"]["data"][0]["y"] == [10.0, None, 30.0]
    assert figures["util_gpu_pct"]["figure"]["data"][0]["x"] == [
        "2026-11-29 16:00:00",
        "2026-11-29 16:00:10",
        "2026-11-29 16:00:20",
    ]
    assert figures["pcie_tx_bytes_per_s"]["figure"]["data"][0]["y"] == [1.0, 3.0, 0.0]
    assert figures["pcie_tx_bytes_per_s"]["meta"]["unit"] == "MiB/s"
    assert figures["nvlink_rx_bytes_per_s"]["figure"]["data"][0]["y"] == [1.0, 2.0, None]
    assert figures["ecc_uncorrected_volatile_count"]["figure"]["data"][0]["y"] == [0.0, 1.0, 1.0]
    assert figures["sm_clock_mhz"]["figure"]["data"][0]["y"] == []
    assert figures["temp_c"]["figure"]["data"][0]["name"] == "GPU 1"
    assert figures["power_w"]["overlay"] == []
    assert figures["power_w"]["figure"]["layout"]["xaxis"]["range"] == [
        "2026-11-29 16:00:00",
        "2026-11-29 16:10:00",
    ]
    assert set(GPU_CHART_METRICS) >= {spec.metric for spec in GPU_CHARTS}


def test_marks_in_the_range_become_lines_and_one_events_overlay_trace() -> None:
    samples = one_gpu({"temp_c": [50, 51, 52]})
    marks = [
        ChartMark(T0 + timedelta(minutes=2), "xid", "Xid 79 on GPU 1"),
        ChartMark(T0 - timedelta(hours=1), "xid", "before the range"),
    ]

    temp = next(f for f in build_gpu_figures(samples, marks=marks) if f["metric"] == "temp_c")

    assert [trace["name"] for trace in temp["figure"]["data"]] == ["GPU 1"]
    [events] = temp["overlay"]
    assert events["name"] == "Events" and events["x"] == ["2026-11-29 16:02:00"]
    assert events["text"] == ["2026-11-29 16:02:00Z · Xid 79 on GPU 1"]
    assert [s["x0"] for s in temp["figure"]["layout"]["shapes"]] == ["2026-11-29 16:02:00"]
    assert temp["meta"]["tz"] == "UTC"


def test_times_are_written_on_the_viewers_wall_clock() -> None:
    samples = one_gpu({"temp_c": [50, 51, 52]})

    temp = next(
        f
        for f in build_gpu_figures(samples, zone=ZoneInfo("Europe/Berlin"))
        if f["metric"] == "temp_c"
    )

    assert temp["figure"]["data"][0]["x"][0] == "2026-11-29T17:00:00+01:00"
    assert temp["meta"]["tz"] == "Europe/Berlin"


def test_an_empty_range_gives_empty_figures_with_the_no_samples_note() -> None:
    samples = SamplesOut(
        hostname="node-a", start=T0, end=T0 + timedelta(hours=1), step_s=10, metrics=[], series=[]
    )

    figures = build_gpu_figures(samples)

    assert all(f["figure"]["data"] == [] for f in figures)
    assert all(
        f["figure"]["layout"]["annotations"][0]["text"] == "No samples in this range"
        for f in figures
    )


def test_counter_increases_are_listed_newest_first_and_a_reset_is_not_one() -> None:
    samples = one_gpu(
        {
            "ecc_corrected_volatile_count": [0, 2, None, 5, 0, 1],
            "ecc_uncorrected_aggregate_count": [4, 4, 4, 4, 4, 9],
        },
        points=6,
    )

    found = counter_increases(samples)

    assert [(c.metric, c.at - T0, c.before, c.after, c.delta) for c in found] == [
        ("ecc_uncorrected_aggregate_count", timedelta(seconds=50), 4, 9, 5),
        ("ecc_corrected_volatile_count", timedelta(seconds=50), 0, 1, 1),
        ("ecc_corrected_volatile_count", timedelta(seconds=30), 2, 5, 3),
        ("ecc_corrected_volatile_count", timedelta(seconds=10), 0, 2, 2),
    ]


def node_with(*gpus: Gpu) -> NodeView:
    return NodeView(
        node=Node(hostname="node-a"), freshness="fresh", gpus=[GpuView(g, None) for g in gpus]
    )


def make_gpu(gpu_id: int, index: int, uuid: str, state: str = "ok", age_s: int = 0) -> Gpu:
    return Gpu(
        id=gpu_id, index=index, uuid=uuid, state=state, last_seen_at=T0 - timedelta(seconds=age_s)
    )


def test_a_gpu_is_found_by_index_or_by_uuid_in_any_case() -> None:
    view = node_with(make_gpu(1, 0, "GPU-aaaa"), make_gpu(2, 1, "GPU-BbBb"))

    assert resolve_gpu(view, key="1").gpu.id == 2
    assert resolve_gpu(view, key="gpu-bbbb").gpu.id == 2
    assert resolve_gpu(view, key=" GPU-AAAA ").gpu.id == 1


def test_a_repeated_index_names_the_gpu_that_is_ok_and_seen_last() -> None:
    old = make_gpu(1, 0, "GPU-old", state="missing", age_s=10)
    lost_recent = make_gpu(2, 0, "GPU-lost", state="lost", age_s=0)
    current = make_gpu(3, 0, "GPU-new", state="ok", age_s=5)

    assert resolve_gpu(node_with(old, lost_recent, current), key="0").gpu.id == 3
    assert resolve_gpu(node_with(old, lost_recent), key="0").gpu.id == 2


@pytest.mark.parametrize("key", ["2", "GPU-cccc", "-1", "0x1", "١"])
def test_an_unknown_index_or_uuid_is_not_found_naming_both(key: str) -> None:
    view = node_with(make_gpu(1, 0, "GPU-aaaa"), make_gpu(2, 1, "GPU-bbbb"))

    with pytest.raises(NotFound, match=r"\(index or UUID\) on node 'node-a'"):
        resolve_gpu(view, key=key)
