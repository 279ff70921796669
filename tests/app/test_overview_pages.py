"""The fleet overview over HTTP, on both backends, with data put in through the real ingest API."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.overview import context as overview_context
from tests.app.test_pages import ingest
from tests.conftest import make_settings
from tests.factories import batch, gpu, iso, sample
from tests.live_server import LiveServer


def get(server: LiveServer, path: str = "/", **params: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", params=params, timeout=30)


def tiles_of(html: str) -> dict[str, str]:
    """Each node tile of the grid by hostname."""
    found = re.findall(
        r'<a class="ov-node n-[a-z]+" href="/nodes/([^"]+)".*?</a>', html, flags=re.S
    )
    blocks = re.findall(
        r'(<a class="ov-node n-[a-z]+" href="/nodes/[^"]+".*?</a>)', html, flags=re.S
    )
    return dict(zip(found, blocks, strict=True))


def cells_of(tile: str) -> list[tuple[str, str, str]]:
    """(class, title, text) of each GPU cell of a tile."""
    return re.findall(r'<span class="c ([^"]+)" title="([^"]*)">([^<]*)</span>', tile)


def seed(server: LiveServer) -> None:
    """a-1 healthy (util 30/90); a-2 GPU 1 lost, Xid 79 (both pod p1); b-1 an L40S (rack r2)."""
    start = datetime.now(UTC) - timedelta(seconds=10)
    gpus = [gpu(i, hostname="gpu-a-1") for i in range(2)]
    ingest(
        server,
        batch(
            "gpu-a-1",
            gpus=gpus,
            labels={"cluster": "a", "ib_pod": "p1", "team": "llm"},
            samples=[sample(g, start, util_gpu_pct=u) for g, u in zip(gpus, (30, 90), strict=True)],
        ),
    )
    lost = [
        gpu(0, hostname="gpu-a-2"),
        gpu(1, hostname="gpu-a-2", state="lost", state_reason="NVML_ERROR_GPU_IS_LOST"),
    ]
    ingest(
        server,
        batch(
            "gpu-a-2",
            gpus=lost,
            labels={"cluster": "a", "ib_pod": "p1"},
            samples=[sample(lost[0], start)],
            events=[
                {
                    "kind": "xid",
                    "xid": 79,
                    "occurred_at": iso(start),
                    "gpu_uuid": lost[1]["uuid"],
                    "message": "NVRM: Xid (PCI:0000:28:00): 79, GPU has fallen off the bus.",
                }
            ],
        ),
    )
    ingest(
        server,
        batch(
            "gpu-b-1",
            gpus=[gpu(0, hostname="gpu-b-1", name="NVIDIA L40S", mem_total_bytes=48 * 2**30)],
            labels={"cluster": "b", "rack": "r2"},
        ),
    )


def test_overview_counts_groups_cells_and_events(server: LiveServer) -> None:
    seed(server)

    html = get(server).text

    counts = re.findall(r'ov-count-(\w+)[^"]*"\s+href="([^"]*)".*?tile-value">(\d+)<', html, re.S)
    assert counts == [
        ("unhealthy", "/?state=unhealthy", "1"),
        ("degraded", "/?state=degraded", "0"),
        ("unknown", "/?state=unknown", "0"),
        ("healthy", "/?state=healthy", "2"),
    ]
    assert list(tiles_of(html)) == ["gpu-a-2", "gpu-a-1", "gpu-b-1"]  # problem group first
    bad = cells_of(tiles_of(html)["gpu-a-2"])
    assert [(css, text) for css, _, text in bad] == [("s-healthy", ""), ("s-unhealthy", "✕")]
    assert bad[1][1].startswith("GPU 1 · NVIDIA H100 80GB HBM3 · Unhealthy: ")
    assert "Xid 79" in bad[1][1]
    assert re.search(r"pod <a [^>]*>p1</a> <span class=\"ov-counts-line\">2 nodes", html)
    assert 'rack <a href="/?label=rack%3Dr2">r2</a>' in html
    events = html[html.index('id="overview-events-h"') :]
    assert '<a href="/nodes/gpu-a-2">gpu-a-2</a>' in events and "Xid 79" in events
    assert 'id="overview-alerts"' in html


def test_overlay_colours_cells_by_value_with_a_legend(server: LiveServer) -> None:
    seed(server)

    util = get(server, overlay="util").text
    mem = get(server, overlay="mem").text

    assert cells_of(tiles_of(util)["gpu-a-1"]) == [
        ("v1", "GPU 0 · NVIDIA H100 80GB HBM3 · 30 % · Healthy", ""),
        ("v4", "GPU 1 · NVIDIA H100 80GB HBM3 · 90 % · Healthy", ""),
    ]
    assert [(c, t) for c, _, t in cells_of(tiles_of(util)["gpu-a-2"])] == [
        ("v2", ""),
        ("nv x", "✕"),
    ]
    assert "20–40 %" in util and 'value="util" selected' in util
    # factory samples: 40 GiB used of an 80 GiB H100 (50 %), of a 48 GiB L40S (83 %)
    assert cells_of(tiles_of(mem)["gpu-a-1"])[0][0] == "v2"
    assert cells_of(tiles_of(mem)["gpu-b-1"])[0][:2] == (
        "v4",
        "GPU 0 · NVIDIA L40S · 83 % · Healthy",
    )


def test_filters_narrow_the_grid_and_the_partial_pushes_the_url(server: LiveServer) -> None:
    seed(server)

    assert list(tiles_of(get(server, label="cluster=b").text)) == ["gpu-b-1"]
    by_model = get(server, model="NVIDIA L40S").text
    assert list(tiles_of(by_model)) == ["gpu-b-1"]
    # The counts are of the nodes with that model (1 healthy), not of the whole fleet.
    counts = dict(
        re.findall(r'ov-count-(\w+)[^>]*>\s*<span class="tile-value">(\d+)</span>', by_model)
    )
    assert counts == {"unhealthy": "0", "degraded": "0", "unknown": "0", "healthy": "1"}
    assert list(tiles_of(get(server, state="unhealthy").text)) == ["gpu-a-2"]
    assert list(tiles_of(get(server, problems="1").text)) == ["gpu-a-2"]
    assert list(tiles_of(get(server, q="A-1").text)) == ["gpu-a-1"]
    partial = httpx.get(
        f"{server.url}/fleet/_nodes",
        params=[("label", "cluster=a"), ("overlay", "temp"), ("problems", "1"), ("push", "1")],
        headers={"HX-Request": "true"},
    )
    assert "<html" not in partial.text and list(tiles_of(partial.text)) == ["gpu-a-2"]
    assert partial.headers["hx-push-url"] == "/?label=cluster%3Da&overlay=temp&problems=1"
    counts = get(server, state="unhealthy").text
    assert 'href="/"' in counts and 'aria-current="true"' in counts  # the active count clears


def test_table_view_keeps_the_node_table_with_the_same_filters(server: LiveServer) -> None:
    seed(server)

    html = get(server, view="table", sort="health").text

    rows = re.findall(r'<tr class="row-[^"]*">.*?href="/nodes/([^"]+)"', html, flags=re.S)
    assert rows == ["gpu-a-2", "gpu-a-1", "gpu-b-1"]
    assert "ov-node" not in html
    assert re.findall(
        r'<tr class="row-[^"]*">.*?href="/nodes/([^"]+)"',
        get(server, view="table", state="healthy").text,
        re.S,
    ) == ["gpu-a-1", "gpu-b-1"]


def test_hostile_labels_and_models_are_escaped(server: LiveServer) -> None:
    evil = '<script>alert("x")</script>&'
    ingest(
        server,
        batch(
            "gpu-evil",
            gpus=[gpu(0, hostname="gpu-evil", name='<img src=x onerror="1">')],
            labels={"cluster": evil, "ib_pod": "p'\"><b>", "team": evil},
        ),
    )

    for html in (
        get(server).text,
        get(server, model='<img src=x onerror="1">').text,
        get(server, view="table").text,
    ):
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>" not in html
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;" in html
    assert list(tiles_of(get(server, label=f"cluster={evil}").text)) == ["gpu-evil"]


def test_unknown_choices_are_400_pages_naming_the_parameter(server: LiveServer) -> None:
    for path, params in (
        ("/", {"overlay": "heat"}),
        ("/fleet/_nodes", {"view": "grid"}),
        ("/", {"state": "ill"}),
    ):
        response = get(server, path, **params)
        assert response.status_code == 400, params
        assert f"{next(iter(params))}: expected one of" in response.text


def test_the_grid_groups_by_pod_rack_or_nvlink_domain(server: LiveServer) -> None:
    """Two NVL72-style nodes share a rack and NVLink domain across two IB pods; a third has a
    rack only: grouped by pod, by rack, or by NVLink domain (the rack where none is set)."""
    nodes = {
        "nvl-1": {"cluster": "a", "ib_pod": "p1", "rack": "r1", "nvlink_domain": "nvl72-r1"},
        "nvl-2": {"cluster": "a", "ib_pod": "p2", "rack": "r1", "nvlink_domain": "nvl72-r1"},
        "hgx-1": {"cluster": "a", "rack": "r9"},
    }
    for host, labels in nodes.items():
        ingest(server, batch(host, gpus=[gpu(0, hostname=host)], labels=labels))

    def groups(**params: str) -> list[str]:
        html = get(server, **params).text
        return re.findall(r'<h3 class="ov-head">([^<]*)<a href="[^"]*">([^<]*)</a>', html)

    assert sorted(groups()) == [("pod ", "p1"), ("pod ", "p2"), ("rack ", "r9")]
    assert sorted(groups(group="rack")) == [("rack ", "r1"), ("rack ", "r9")]
    assert sorted(groups(group="nvlink_domain")) == [
        ("NVLink domain ", "nvl72-r1"),
        ("rack ", "r9"),
    ]
    domain = get(server, group="nvlink_domain").text
    assert 'href="/?label=nvlink_domain%3Dnvl72-r1&amp;group=nvlink_domain"' in domain
    bad = get(server, group="row")
    assert bad.status_code == 400 and "group" in bad.text


def test_the_table_is_paged_sorted_over_every_node_and_the_refresh_keeps_the_page(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_context, "PAGE_ROWS", 2)
    seed(server)
    row = r'<tr class="row-[^"]*">.*?href="/nodes/([^"]+)"'

    first = get(server, view="table", sort="health").text
    second = get(server, view="table", sort="health", page="2").text
    beyond = get(server, view="table", sort="health", page="9").text

    assert re.findall(row, first, re.S) == ["gpu-a-2", "gpu-a-1"]  # the unhealthy node first
    assert re.findall(row, second, re.S) == ["gpu-b-1"]
    assert re.findall(row, beyond, re.S) == ["gpu-b-1"]  # past the end: the last page
    assert "Rows 3–3 of 3" in second and 'rel="prev"' in second and 'rel="next"' not in second
    assert 'href="/?sort=health&amp;view=table&amp;page=2" rel="next"' in first
    assert '<input type="hidden" id="fleet-page" name="page" value="2">' in second
    assert 'hx-include="#fleet-filters, #fleet-page"' in second
    # The summary tiles count every node, not the page's.
    assert re.search(r'tile-value">3</span><span class="tile-label">nodes', second)
    # The 5-s refresh of page 2 stays there; a filter change (push=1) goes back to page 1.
    refresh = get(server, "/fleet/_nodes", view="table", sort="health", page="2").text
    assert re.findall(row, refresh, re.S) == ["gpu-b-1"]
    pushed = httpx.get(
        f"{server.url}/fleet/_nodes",
        params={"view": "table", "sort": "health", "page": "2", "push": "1"},
        timeout=30,
    )
    assert re.findall(row, pushed.text, re.S) == ["gpu-a-2", "gpu-a-1"]
    assert pushed.headers["HX-Push-Url"] == "/?sort=health&view=table"
    # A label link leaves the page.
    assert "page=2" not in re.search(r'href="(/\?[^"]*label=[^"]*)"', second).group(1)


def test_a_page_that_is_not_a_number_is_a_400_naming_it(server: LiveServer) -> None:
    for value in ("0", "-1", "two", "1e3", "99999999", "²", "２", "١", "9" * 5000):
        response = get(server, view="table", page=value)
        assert response.status_code == 400, value
        assert "page: expected a whole number from 1" in response.text


def test_a_big_grid_draws_all_healthy_groups_as_one_line(db_url: str, tmp_path: Path) -> None:
    """Above FLEETWATCH_GRID_COLLAPSE_ABOVE_NODES, a cluster's groups whose nodes are all
    healthy are one line (with a link to every tile, expand=1, kept by the refresh), problem
    groups keep their tiles, and one group alone is never collapsed."""
    server = LiveServer(make_settings(db_url, tmp_path, grid_collapse_above_nodes=2))
    server.start()
    try:
        seed(server)  # cluster a, pod p1: a-1 healthy, a-2 unhealthy; cluster b, rack r2: b-1
        html = get(server).text
        assert sorted(tiles_of(html)) == ["gpu-a-1", "gpu-a-2"]  # p1 has a problem
        collapsed = re.findall(r'<p class="ov-collapsed[^"]*">(.*?)</p>', html, re.S)
        assert len(collapsed) == 1
        assert "1 group with all 1 node healthy" in collapsed[0]
        assert 'href="/?expand=1"' in collapsed[0]
        assert "2 nodes, 4 GPUs shown, 1 healthy nodes summed up" in html
        expanded = get(server, expand="1").text
        assert sorted(tiles_of(expanded)) == ["gpu-a-1", "gpu-a-2", "gpu-b-1"]
        assert '<input type="hidden" name="expand" value="1">' in expanded  # the refresh too
        assert sorted(tiles_of(get(server, "/fleet/_nodes", expand="1").text)) == [
            "gpu-a-1",
            "gpu-a-2",
            "gpu-b-1",
        ]
        assert list(tiles_of(get(server, label="rack=r2").text)) == ["gpu-b-1"]  # one group
        # Value overlays and the table are not collapsed.
        assert sorted(tiles_of(get(server, overlay="util").text)) == [
            "gpu-a-1",
            "gpu-a-2",
            "gpu-b-1",
        ]
        assert get(server, expand="yes").status_code == 400
    finally:
        server.stop()


def test_a_label_with_many_values_is_typed_not_listed(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_context, "MAX_CHOICES", 1)
    seed(server)  # clusters a and b: two values

    html = get(server, label="cluster=b").text

    field = re.search(r'<input id="label-cluster"[^>]*>', html, re.S)
    assert field is not None and 'class="label-text"' in field.group(0)
    assert 'value="cluster=b"' in field.group(0) and "(2 values)" in field.group(0)
    assert '<select id="label-cluster"' not in html
    assert '<select id="label-rack"' in html  # one value: still a list
    assert "from:.label-text" in html
