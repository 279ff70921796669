"""The fleet overview in headless Chromium: overlay switch, filters in the URL, htmx refresh of
the grid, keyboard-reachable tiles."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_fleet_browser import Tab, add_node, assert_clean
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

CELLS = "a[href='/nodes/{}'] .c"


def cell_classes(tab: Tab, hostname: str) -> list[str]:
    page, _ = tab
    return page.locator(CELLS.format(hostname)).evaluate_all("els => els.map(e => e.className)")


def test_overlay_switch_recolours_the_cells_and_puts_it_in_the_url(
    page: Tab, live: LiveServer
) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=2, labels={"cluster": "a", "ib_pod": "p1"})
    add_node(live, "gpu-b-001", gpus=2, lost=1, labels={"cluster": "b", "ib_pod": "p9"})
    tab.goto(live.url + "/")
    assert cell_classes(page, "gpu-b-001") == ["c s-healthy", "c s-unhealthy"]
    expect(tab.locator(CELLS.format("gpu-b-001")).nth(1)).to_have_text("✕")
    # the group with the lost GPU comes first
    expect(tab.locator(".ov-node").first).to_have_attribute("href", "/nodes/gpu-b-001")

    tab.select_option("#overlay", "temp")

    tab.wait_for_url("**/?overlay=temp")
    expect(tab.locator(CELLS.format("gpu-a-001")).first).to_have_class(re.compile(r"^c v[0-4]$"))
    assert cell_classes(page, "gpu-b-001")[1] == "c nv x"
    expect(tab.locator(".ov-legend")).to_contain_text("≥ 85 °C")
    assert_clean(problems)


def test_a_filter_change_narrows_the_grid_and_updates_the_url(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=1, labels={"cluster": "a"})
    add_node(live, "gpu-b-001", gpus=1, lost=0, labels={"cluster": "b"})
    tab.goto(live.url + "/")

    tab.select_option("#label-cluster", "cluster=b")

    tab.wait_for_url("**/?label=cluster%3Db")
    expect(tab.locator("a.ov-node[href='/nodes/gpu-a-001']")).to_have_count(0)
    expect(tab.locator("a.ov-node[href='/nodes/gpu-b-001']")).to_be_visible()
    tab.locator("#problems").check()
    tab.wait_for_url("**/?label=cluster%3Db&problems=1")
    tab.reload()
    expect(tab.locator("#label-cluster")).to_have_value("cluster=b")
    expect(tab.locator("#problems")).to_be_checked()
    tab.locator("a.ov-count-unhealthy").click()
    tab.wait_for_url("**/?label=cluster%3Db&state=unhealthy&problems=1")
    expect(tab.locator("#state")).to_have_value("unhealthy")
    assert_clean(problems)


def test_the_refresh_swaps_the_grid_without_reloading_the_page(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=1)
    tab.goto(live.url + "/?overlay=util")
    tab.evaluate("window.__notReloaded = true; document.getElementById('ov-grid').__old = true")

    add_node(live, "gpu-a-002", gpus=1)

    expect(tab.locator("a.ov-node[href='/nodes/gpu-a-002']")).to_be_visible(timeout=12_000)
    assert tab.evaluate("window.__notReloaded") is True
    assert tab.evaluate("document.getElementById('ov-grid').__old === undefined") is True
    assert cell_classes(page, "gpu-a-002")[0].startswith("c v")  # the overlay was kept
    assert tab.url.endswith("/?overlay=util")
    assert_clean(problems)


def test_tiles_are_reached_with_the_keyboard_and_open_the_node(page: Tab, live: LiveServer) -> None:
    tab, _ = page
    add_node(live, "gpu-a-001", gpus=2)
    tab.goto(live.url + "/")
    tab.locator("#problems").focus()

    for _ in range(12):
        tab.keyboard.press("Tab")
        if tab.evaluate("document.activeElement.classList.contains('ov-node')"):
            break
    else:
        pytest.fail("Tab never reached a node tile")
    assert tab.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    tab.keyboard.press("Enter")
    tab.wait_for_url("**/nodes/gpu-a-001")
