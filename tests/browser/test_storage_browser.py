"""``/storage`` in headless Chromium: local assets only, no console errors, Plotly charts drawn,
filters and ranges in the URL, the "now" tables refreshed by htmx and pausable."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.app.test_storage_page import HOSTILE, seed, send
from tests.browser.conftest import Problems, shot
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_storage_page_draws_charts_without_errors(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    seed(live)

    tab.goto(live.url + "/")
    tab.get_by_role("link", name="Storage").click()
    tab.wait_for_url("**/storage")

    tab.wait_for_selector("#chart-disk_read_bytes_per_s .main-svg")
    legend = tab.locator("#chart-disk_read_bytes_per_s .legendtext")
    expect(legend).to_have_text(["node-a nvme0n1", "node-b sda"])
    expect(tab.locator("#chart-nfs_avg_rtt_s .legendtext").first).to_have_text("node-b " + HOSTILE)
    expect(tab.locator("#chart-ib_errors .scatterlayer .trace")).to_have_count(1)
    expect(tab.locator("table.slowest-mounts")).to_contain_text(HOSTILE)
    shot(tab, "storage")
    assert tab.evaluate("window.__pwned === undefined")
    assert_clean(problems)


def test_filter_and_range_changes_update_the_url(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    seed(live)
    tab.goto(live.url + "/storage?range=6h")

    tab.locator("#match").fill("nvme")
    tab.locator("#match").press("Enter")
    tab.wait_for_url("**/storage?range=6h&match=nvme")
    expect(tab.locator("#chart-disk_read_bytes_per_s .legendtext")).to_have_text(["node-a nvme0n1"])
    tab.locator("#top").select_option("5")
    tab.locator("#storage-filters").get_by_role("button", name="Apply").click()
    tab.wait_for_url("**/storage?range=6h&match=nvme&top=5")

    tab.get_by_role("link", name="24h").click()
    tab.wait_for_url("**/storage?range=24h&match=nvme&top=5")
    expect(tab.locator(".ranges [aria-current='true']")).to_have_text("24h")
    assert_clean(problems)


def test_now_tables_refresh_unless_paused_and_empty_state(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    tab.goto(live.url + "/storage")
    expect(tab.locator("#no-storage-data")).to_be_visible()
    tab.wait_for_selector("#chart-disk_read_bytes_per_s .main-svg")
    tab.get_by_role("button", name="Pause refresh").click()

    seed(live)
    tab.wait_for_timeout(6_000)
    expect(tab.locator("table.busiest-devices")).to_have_count(0)
    tab.get_by_role("button", name="Resume refresh").click()
    expect(tab.locator("table.busiest-devices")).to_contain_text("nvme0n1", timeout=12_000)
    assert_clean(problems)


def test_dark_theme_redraws_the_charts(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    send(live, "node-x", {}, {})
    tab.goto(live.url + "/storage")
    tab.wait_for_selector("#chart-nfs_retransmits .main-svg")
    tab.locator("#theme-toggle").click()
    expect(tab.locator("html")).to_have_attribute("data-theme", "dark")
    tab.wait_for_selector("#chart-nfs_retransmits .main-svg")
    assert_clean(problems)
