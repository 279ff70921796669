"""The GPU page in headless Chromium: local assets only, Plotly charts, htmx live refresh without
a reload, the range in the URL, and the way in from the node page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Problems, shot
from tests.browser.fleet_data import node_history, post_batch
from tests.factories import batch, create_token, gpu, sample
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]
CHARTED = (
    "util_gpu_pct",
    "mem_used_bytes",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "pcie_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s",
    "ecc_corrected_volatile_count",
)


def add_node(live: LiveServer, hostname: str, **kwargs: object) -> str:
    """Ingest ``hostname`` with 10 minutes of history; returns its token."""
    token = create_token(live.settings.effective_database_url, hostname)
    post_batch(live.url, token, node_history(hostname, minutes=10, **kwargs))  # type: ignore[arg-type]
    return token


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_gpu_page_draws_its_charts_without_errors(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=2, lost=1)

    tab.goto(live.url + "/nodes/gpu-a-001/gpus/1?range=15m")

    expect(tab.get_by_role("heading", level=1)).to_contain_text("GPU 1")
    for metric in CHARTED:
        expect(tab.locator(f"#chart-{metric} svg.main-svg").first).to_be_attached()
    # the GPU's line and the Events markers of its Xid 79
    names = tab.evaluate("document.getElementById('chart-temp_c').data.map(t => t.name)")
    assert names == ["GPU 1", "Events"]
    expect(tab.locator("#chart-temp_c .scatterlayer .trace.scatter").first).to_be_attached()
    expect(tab.locator("#gpu-health")).to_contain_text("Unhealthy")
    expect(tab.locator(".gpu-events")).to_contain_text("GPU has fallen off the bus")
    shot(tab, "gpu-page")
    assert_clean(problems)


def test_charts_refresh_from_the_gpu_samples_api(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    token = add_node(live, "gpu-a-001", gpus=2)
    tab.goto(live.url + "/nodes/gpu-a-001/gpus/1?range=15m")
    expect(tab.locator("#chart-temp_c svg.main-svg").first).to_be_attached()
    before = tab.evaluate("document.getElementById('chart-temp_c').data[0].y.length")

    g = gpu(1, hostname="gpu-a-001")
    at = datetime.now(UTC) - timedelta(seconds=1)  # inside the window the refresh asks for
    post_batch(live.url, token, batch("gpu-a-001", gpus=[g], samples=[sample(g, at, temp_c=91)]))
    with tab.expect_response(
        lambda r: f"/api/v1/nodes/gpu-a-001/gpus/{g['uuid']}/samples" in r.url
    ):
        tab.get_by_role("button", name="Pause refresh").click()
        tab.get_by_role("button", name="Resume refresh").click()

    # A function, not an expression: Playwright polls an expression with eval(), which the
    # pages' CSP refuses (no 'unsafe-eval') once the first check comes out false.
    tab.wait_for_function(
        f"() => document.getElementById('chart-temp_c').data[0].y.length > {before}"
    )
    assert tab.evaluate("document.getElementById('chart-temp_c').data[0].y.slice(-1)[0]") == 91
    assert tab.evaluate("document.getElementById('chart-temp_c').data.length") == 1
    assert_clean(problems)


def test_live_values_refresh_without_a_reload_unless_paused(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    token = add_node(live, "gpu-a-001", gpus=1)
    tab.goto(live.url + "/nodes/gpu-a-001/gpus/0")
    tab.evaluate("window.__notReloaded = true")
    temp = tab.locator('td[data-metric="temp_c"]')
    tab.get_by_role("button", name="Pause refresh").click()

    g = gpu(0, hostname="gpu-a-001")
    at = datetime.now(UTC) + timedelta(seconds=1)
    post_batch(live.url, token, batch("gpu-a-001", gpus=[g], samples=[sample(g, at, temp_c=97)]))
    tab.wait_for_timeout(6_000)
    expect(temp).not_to_contain_text("97 °C")
    tab.get_by_role("button", name="Resume refresh").click()

    expect(temp).to_contain_text("97 °C", timeout=12_000)
    assert tab.evaluate("window.__notReloaded") is True
    assert_clean(problems)


def test_a_range_change_puts_the_range_in_the_url(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=1)
    tab.goto(live.url + "/nodes/gpu-a-001/gpus/0")

    tab.get_by_role("navigation", name="Chart range").get_by_role("link", name="6h").click()

    tab.wait_for_url("**/nodes/gpu-a-001/gpus/0?range=6h")
    expect(tab.locator(".ranges a[aria-current='true']")).to_have_text("6h")
    expect(tab.locator("#gpu-live")).to_have_attribute(
        "hx-get",
        "/nodes/gpu-a-001/gpus/" + gpu(0, hostname="gpu-a-001")["uuid"] + "/_live?range=6h",
    )
    expect(tab.locator("#chart-util_gpu_pct svg.main-svg").first).to_be_attached()
    assert_clean(problems)


def test_the_node_page_gpu_name_leads_to_the_gpu_page(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    add_node(live, "gpu-a-001", gpus=2)
    uuid = gpu(1, hostname="gpu-a-001")["uuid"]
    tab.goto(live.url + "/nodes/gpu-a-001")

    tab.locator(f"a[href='/nodes/gpu-a-001/gpus/{uuid}']").click()

    tab.wait_for_url(f"**/nodes/gpu-a-001/gpus/{uuid}")
    expect(tab.locator("#gpu-identity")).to_contain_text(uuid)
    assert_clean(problems)
