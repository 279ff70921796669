"""The node topology page in headless Chromium: no console errors or foreign requests, the SVG
graph with focusable GPU links, a down NVLink named "down" and drawn dashed in red."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from tests.app.section_factories import nvlinks, topology
from tests.browser.conftest import Problems, shot
from tests.browser.fleet_data import post_batch
from tests.factories import batch, create_token, gpu
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]


def add_hgx_node(live: LiveServer, hostname: str, *, down_gpu: int, down_link: int) -> None:
    """An 8-GPU NVSwitch node whose GPU ``down_gpu`` reports NVLink ``down_link`` down."""
    gpus = [gpu(i, hostname=hostname) for i in range(8)]
    at = datetime.now(UTC) - timedelta(seconds=20)
    links = [link for g in gpus for link in nvlinks(g, at)]
    for link in links:
        if link["gpu_uuid"] == gpus[down_gpu]["uuid"] and link["link"] == down_link:
            link.update(state="down", speed_gbps=None)
    payload = batch(
        hostname, gpus=gpus, samples_per_gpu=1, nvlinks=links, topology=topology(gpus, at)
    )
    post_batch(live.url, create_token(live.settings.effective_database_url, hostname), payload)


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_topology_page_draws_gpus_and_names_the_down_link(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_hgx_node(live, "gpu-a-001", down_gpu=5, down_link=2)

    tab.goto(live.url + "/nodes/gpu-a-001")
    tab.get_by_role("link", name="Topology graph").click()
    tab.wait_for_url("**/nodes/gpu-a-001/topology")

    svg = tab.locator("svg.topo-graph")
    expect(svg).to_be_visible()
    expect(svg.locator("a.node-gpu")).to_have_count(8)
    down = svg.locator("g.edge[data-state='down']")
    expect(down).to_have_count(1)
    expect(down.locator("text")).to_have_text("NV18 · 1 down")
    assert down.get_attribute("data-a") == "GPU5"
    line = down.locator("path")
    assert line.evaluate("p => getComputedStyle(p).strokeDasharray") == "8px, 5px"
    up = svg.locator("g.edge-nvlink[data-state='up'] path").first
    assert up.evaluate("p => getComputedStyle(p).strokeDasharray") == "none"
    assert line.evaluate("p => getComputedStyle(p).stroke") != up.evaluate(
        "p => getComputedStyle(p).stroke"
    )
    expect(tab.locator("table.topo")).to_be_visible()
    shot(tab, "node-topology")
    assert_clean(problems)


def test_gpu_boxes_are_reachable_with_the_keyboard(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_hgx_node(live, "gpu-a-002", down_gpu=0, down_link=0)
    tab.goto(live.url + "/nodes/gpu-a-002/topology")
    first = tab.locator("svg.topo-graph a.node-gpu").first
    first.focus()
    focused = tab.evaluate(
        "['href', 'aria-label'].map(name => document.activeElement.getAttribute(name))"
    )
    assert focused == ["/nodes/gpu-a-002/gpus/0", "GPU0, NUMA 0, NVLink 0 down: open the GPU page"]
    tab.keyboard.press("Tab")
    assert tab.evaluate("document.activeElement.getAttribute('href')") == "/nodes/gpu-a-002/gpus/1"
    assert_clean(problems)


def test_a_node_without_topology_shows_the_empty_state(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    post_batch(
        live.url,
        create_token(live.settings.effective_database_url, "gpu-b-001"),
        batch("gpu-b-001", gpus=1, samples_per_gpu=1),
    )
    tab.goto(live.url + "/nodes/gpu-b-001/topology")
    expect(tab.get_by_role("heading", name="No topology reported")).to_be_visible()
    expect(tab.locator("svg.topo-graph")).to_have_count(0)
    assert_clean(problems)
