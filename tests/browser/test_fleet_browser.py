"""The pages in headless Chromium: local assets only, htmx refresh, Plotly charts, keyboard."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Problems, shot
from tests.browser.fleet_data import node_history, post_batch
from tests.factories import batch, create_token
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]


def add_node(live: LiveServer, hostname: str, *, minutes: int = 5, **kwargs: Any) -> None:
    """Ingest ``hostname`` through the API (a few minutes of history for its charts)."""
    payload = node_history(hostname, minutes=minutes, **kwargs)
    post_batch(live.url, create_token(live.settings.effective_database_url, hostname), payload)


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_fleet_page_loads_local_assets_without_errors_and_shows_the_nodes(
    page: Tab, live: LiveServer
) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=2, labels={"cluster": "a"})
    add_node(live, "gpu-b-001", gpus=2, no_util=True, labels={"cluster": "b"})

    tab.goto(live.url + "/")

    expect(tab.locator("a[href='/nodes/gpu-a-001']")).to_be_visible()
    shot(tab, "fleet-overview")
    tab.wait_for_function("() => window.htmx !== undefined")  # a function: no eval() (CSP)
    tab.goto(live.url + "/?view=table")  # the node table, the overview's other view
    expect(tab.locator("tr", has=tab.locator("a[href='/nodes/gpu-b-001']"))).to_contain_text("N/A")
    shot(tab, "fleet-table")
    assert_clean(problems)


def test_htmx_refresh_shows_a_new_node_without_reloading_unless_paused(
    page: Tab, live: LiveServer
) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=1)
    tab.goto(live.url + "/")
    tab.evaluate("window.__notReloaded = true")
    tab.get_by_role("button", name="Pause refresh").click()

    add_node(live, "gpu-a-002", gpus=1)
    tab.wait_for_timeout(6_000)
    expect(tab.locator("a[href='/nodes/gpu-a-002']")).to_have_count(0)
    expect(tab.locator("#live-status")).to_contain_text("Paused")
    tab.get_by_role("button", name="Resume refresh").click()

    expect(tab.locator("a[href='/nodes/gpu-a-002']")).to_be_visible(timeout=12_000)
    assert tab.evaluate("window.__notReloaded") is True
    expect(tab.locator("#live-status")).to_contain_text("updated")
    assert_clean(problems)


def test_typing_a_search_filters_live_and_puts_it_in_the_url(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=1)
    add_node(live, "gpu-b-001", gpus=1)
    tab.goto(live.url + "/")

    tab.locator("#q").fill("b-0")

    tab.wait_for_url("**/?q=b-0")
    expect(tab.locator("a[href='/nodes/gpu-a-001']")).to_have_count(0)
    expect(tab.locator("a[href='/nodes/gpu-b-001']")).to_be_visible()
    tab.reload()
    expect(tab.locator("#q")).to_have_value("b-0")
    expect(tab.locator("a[href='/nodes/gpu-a-001']")).to_have_count(0)
    assert_clean(problems)


def test_node_page_draws_one_trace_per_gpu_and_refreshes_them_from_the_api(
    page: Tab, live: LiveServer
) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=3, minutes=10)
    tab.goto(live.url + "/nodes/gpu-a-001?range=15m")

    for metric in ("util_gpu_pct", "mem_used_bytes", "power_w", "temp_c"):
        expect(tab.locator(f"#chart-{metric} svg.main-svg").first).to_be_attached()
        expect(tab.locator(f"#chart-{metric} .scatterlayer .trace")).to_have_count(3)

    # A fourth GPU appears; resuming refreshes the charts from /api/v1/nodes/…/samples at once.
    start = datetime.now(UTC) - timedelta(minutes=2)
    post_batch(
        live.url,
        create_token(live.settings.effective_database_url, "gpu-a-001"),
        batch("gpu-a-001", gpus=4, samples_per_gpu=5, start=start),
    )
    with tab.expect_response(lambda r: "/api/v1/nodes/gpu-a-001/samples" in r.url):
        tab.get_by_role("button", name="Pause refresh").click()
        tab.get_by_role("button", name="Resume refresh").click()

    expect(tab.locator("#chart-util_gpu_pct .scatterlayer .trace")).to_have_count(4)
    shot(tab, "node-page")
    assert tab.evaluate("document.getElementById('chart-temp_c').data.length") == 4
    assert_clean(problems)


def test_keyboard_tab_reaches_the_search_box_with_a_visible_focus(
    page: Tab, live: LiveServer
) -> None:
    tab, _ = page
    tab.goto(live.url + "/")

    for _ in range(20):  # past the skip link, the main nav and the page's live controls
        tab.keyboard.press("Tab")
        if tab.evaluate("document.activeElement.id") == "q":
            break
    else:
        pytest.fail("Tab never reached the hostname search box")
    outline = tab.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"


def test_theme_toggle_is_remembered(page: Tab, live: LiveServer) -> None:
    tab, _ = page
    tab.goto(live.url + "/")
    before = tab.evaluate("document.documentElement.dataset.theme")

    tab.locator("#theme-toggle").click()
    tab.reload()

    after = tab.evaluate("document.documentElement.dataset.theme")
    assert {before, after} == {"light", "dark"}
