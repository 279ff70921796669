"""The overview's pure parts: overlay values and buckets, cells, grouping and ordering, filters
and their URL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.errors import BadRequest
from app.fleet import service as fleet_service
from app.fleet.models import Gpu, Node
from app.fleet.pages import FleetFilters
from app.fleet.service import GpuView, NodeView
from app.health import checks
from app.health.rules import State
from app.health.schemas import GpuHealthOut, NodeHealthOut, ReasonOut, StateCounts
from app.metrics.catalog import METRIC_NAMES
from app.overview import tiles
from app.overview.filters import OverviewFilters
from app.overview.service import LATEST_METRICS

H100 = "NVIDIA H100 80GB HBM3"
GiB = 2**30


def gpu_view(
    index: int, *, name: str | None = H100, total: int | None = 80 * GiB, **latest: Any
) -> GpuView:
    return GpuView(
        Gpu(id=index + 1, index=index, uuid=f"GPU-{index}", name=name, mem_total_bytes=total),
        None,
        latest,
    )


def node_view(hostname: str, labels: dict[str, str], gpus: list[GpuView] | None = None) -> NodeView:
    return NodeView(node=Node(hostname=hostname, labels=labels), freshness="fresh", gpus=gpus or [])


def reason(state: State, text: str) -> ReasonOut:
    return ReasonOut(state=state, code="x", text=text, since=None, evidence="/")


def node_health(
    hostname: str, state: State, gpus: list[GpuHealthOut] | None = None
) -> NodeHealthOut:
    reasons = [r for g in gpus or [] for r in g.reasons]
    return NodeHealthOut(
        hostname=hostname,
        state=state,
        cluster="c",
        group="g",
        reasons=reasons,
        gpus=gpus or [],
        gpu_counts=StateCounts(),
    )


def gpu_health(index: int, state: State, *texts: str) -> GpuHealthOut:
    return GpuHealthOut(
        index=index,
        uuid=f"GPU-{index}",
        name=H100,
        state=state,
        reasons=[reason(state, t) for t in texts],
    )


def test_overlay_values_come_from_the_latest_sample_and_the_inventory() -> None:
    g = gpu_view(
        0, util_gpu_pct=37, temp_c=71, mem_used_bytes=20 * GiB, power_w=350, power_limit_w=700
    )

    assert tiles.overlay_value("util", g) == 37.0
    assert tiles.overlay_value("temp", g) == 71.0
    assert tiles.overlay_value("mem", g) == 25.0
    assert tiles.overlay_value("power", g) == 50.0


def test_an_unknown_total_or_limit_or_value_is_none_never_zero() -> None:
    assert tiles.overlay_value("mem", gpu_view(0, total=None, mem_used_bytes=GiB)) is None
    assert tiles.overlay_value("power", gpu_view(0, power_w=300, power_limit_w=None)) is None
    assert tiles.overlay_value("util", gpu_view(0, util_gpu_pct=None)) is None
    assert tiles.overlay_value("temp", gpu_view(0)) is None
    with pytest.raises(ValueError, match="health"):
        tiles.overlay_value("health", gpu_view(0))


@pytest.mark.parametrize(
    ("overlay", "value", "expected"),
    [
        ("util", 0, 0),
        ("util", 19.9, 0),
        ("util", 20, 1),
        ("util", 79.9, 3),
        ("util", 100, 4),
        ("temp", 49, 0),
        ("temp", 65, 2),
        ("temp", 84.9, 3),
        ("temp", 85, 4),
        ("power", 112, 4),
    ],
)
def test_bucket_counts_the_bounds_reached(overlay: str, value: float, expected: int) -> None:
    assert tiles.bucket(overlay, value) == expected


def test_legend_names_each_colour_with_its_range() -> None:
    assert tiles.legend("temp") == [
        ("v0", "< 50 °C"),
        ("v1", "50–65 °C"),
        ("v2", "65–75 °C"),
        ("v3", "75–85 °C"),
        ("v4", "≥ 85 °C"),
        ("nv", "N/A not reported"),
    ]
    assert [css for css, _ in tiles.legend("health")] == [
        "s-healthy",
        "s-degraded",
        "s-unhealthy",
        "s-unknown",
    ]


def test_health_cells_carry_a_glyph_and_a_title_with_the_reasons() -> None:
    g = gpu_view(3, util_gpu_pct=45)

    bad = tiles.make_cell("health", g, gpu_health(3, State.UNHEALTHY, "Xid 79", "lost"))
    unknown = tiles.make_cell("health", g, None)

    assert bad == tiles.Cell(
        3, "s-unhealthy", "✕", f"GPU 3 · {H100} · Unhealthy: Xid 79; lost", State.UNHEALTHY
    )
    assert (unknown.css, unknown.glyph, unknown.title) == (
        "s-unknown",
        "N/A",
        f"GPU 3 · {H100} · Unknown",
    )
    assert tiles.make_cell("health", g, gpu_health(3, State.DEGRADED)).glyph == "!"
    assert tiles.make_cell("health", g, gpu_health(3, State.HEALTHY)).glyph == ""


def test_value_cells_show_the_value_and_still_mark_the_state() -> None:
    g = gpu_view(1, name=None, power_w=630, power_limit_w=700)

    cell = tiles.make_cell("power", g, gpu_health(1, State.DEGRADED, "power throttling"))
    no_limit = tiles.make_cell("power", gpu_view(1, power_w=300), gpu_health(1, State.HEALTHY))
    no_util = tiles.make_cell("util", gpu_view(1), gpu_health(1, State.UNHEALTHY))

    assert cell == tiles.Cell(
        1,
        "v4 w",
        "!",
        "GPU 1 · unknown model · 90 % of limit (630 W) · Degraded: power throttling",
        State.DEGRADED,
    )
    assert (no_limit.css, no_limit.glyph) == ("nv", "N/A")
    assert no_limit.title == f"GPU 1 · {H100} · 300 W, limit not reported · Healthy"
    assert (no_util.css, no_util.glyph) == ("nv x", "✕")


def test_tile_title_sums_up_the_node() -> None:
    view = node_view("n1", {}, [gpu_view(0), gpu_view(1)])
    health = node_health(
        "n1", State.DEGRADED, [gpu_health(0, State.HEALTHY), gpu_health(1, State.DEGRADED, "hot")]
    )

    tile = tiles.make_tile("health", view, health)

    assert tile.title == "n1 · Degraded · 1 of 2 GPUs not healthy · hot"
    assert [c.css for c in tile.cells] == ["s-healthy", "s-degraded"]


def fleet() -> tuple[list[NodeView], dict[str, NodeHealthOut]]:
    specs = [
        ("a-1", {"cluster": "a", "ib_pod": "p1"}, State.HEALTHY),
        ("a-2", {"cluster": "a", "ib_pod": "p1"}, State.HEALTHY),
        ("a-3", {"cluster": "a", "ib_pod": "p2"}, State.HEALTHY),
        ("a-4", {"cluster": "a", "ib_pod": "p2"}, State.UNHEALTHY),
        ("a-5", {"cluster": "a", "rack": "r9"}, State.DEGRADED),
        ("b-1", {"cluster": "b", "pod": "q"}, State.HEALTHY),
        ("x-1", {}, State.UNKNOWN),
    ]
    views = [node_view(h, labels, [gpu_view(0)]) for h, labels, _ in specs]
    health = {h: node_health(h, s, [gpu_health(0, s)]) for h, _, s in specs}
    return views, health


def test_grid_groups_cluster_then_pod_then_rack_with_problems_first() -> None:
    views, health = fleet()

    grid = tiles.build_grid(views, health)

    assert [(c.name, c.counts.worst) for c in grid] == [
        ("a", State.UNHEALTHY),
        ("unlabelled", State.UNKNOWN),
        ("b", State.HEALTHY),
    ]
    a = grid[0]
    assert [(g.kind, g.name, g.counts.total) for g in a.groups] == [
        ("ib_pod", "p2", 2),
        ("rack", "r9", 1),
        ("ib_pod", "p1", 2),
    ]
    assert [n.hostname for n in a.groups[0].nodes] == ["a-4", "a-3"]
    assert (a.counts.healthy, a.counts.degraded, a.counts.unhealthy) == (3, 1, 1)
    assert [(g.kind, g.name) for g in grid[1].groups] == [("none", "ungrouped")]
    assert [c.labelled for c in grid] == [True, False, True]
    assert [(g.kind, g.name) for g in grid[2].groups] == [("pod", "q")]


def test_problems_only_keeps_counts_but_drops_healthy_nodes_and_empty_groups() -> None:
    views, health = fleet()

    grid = tiles.build_grid(views, health, problems_only=True)

    assert [c.name for c in grid] == ["a", "unlabelled"]
    assert [(g.name, [n.hostname for n in g.nodes], g.counts.total) for g in grid[0].groups] == [
        ("p2", ["a-4"], 2),
        ("r9", ["a-5"], 1),
    ]


def test_select_nodes_by_state_and_model_and_the_filter_choices() -> None:
    views, health = fleet()
    views[1].gpus.append(gpu_view(1, name="NVIDIA L40S"))

    assert [v.node.hostname for v in tiles.select_nodes(views, health, state="unhealthy")] == [
        "a-4"
    ]
    assert [v.node.hostname for v in tiles.select_nodes(views, health, model="NVIDIA L40S")] == [
        "a-2"
    ]
    assert tiles.filter_options(views, ("cluster", "ib_pod", "team")) == {
        "cluster": ["a", "b"],
        "ib_pod": ["p1", "p2"],
        "team": [],
        "model": [H100, "NVIDIA L40S"],
    }


def test_filters_round_trip_through_the_url_leaving_defaults_out() -> None:
    base = FleetFilters.parse(" gpu ", ["cluster=a"], None)
    filters = OverviewFilters.parse(
        base, state="unhealthy", model="H100 & co", overlay="temp", view=None, problems="1"
    )

    assert (
        filters.query()
        == "?q=gpu&label=cluster%3Da&state=unhealthy&model=H100+%26+co&overlay=temp&problems=1"
    )
    assert (
        filters.query(state=None, problems=False, label_drop="cluster")
        == "?q=gpu&model=H100+%26+co&overlay=temp"
    )
    assert (
        OverviewFilters.parse(
            FleetFilters.parse(None, [], None), overlay="health", view="tiles"
        ).query()
        == ""
    )
    assert (
        OverviewFilters.parse(base, view="table").query(view="tiles") == "?q=gpu&label=cluster%3Da"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("overlay", "heat"), ("view", "list"), ("state", "sick"), ("problems", "yes")],
)
def test_an_unknown_choice_is_a_bad_request_naming_the_parameter(field: str, value: str) -> None:
    with pytest.raises(BadRequest, match=f"^{field}: expected one of"):
        OverviewFilters.parse(FleetFilters.parse(None, [], None), **{field: value})


def test_the_overview_reads_every_latest_metric_the_health_checks_and_table_use() -> None:
    sources = [Path(checks.__file__).read_text(), Path(fleet_service.__file__).read_text()]
    used = {
        name
        for text in sources
        for name in re.findall(r'"([a-z0-9_]+)"', text)
        if name in METRIC_NAMES
    }

    assert used and used <= set(LATEST_METRICS)
    assert {name for name in LATEST_METRICS if name not in METRIC_NAMES} == set()
