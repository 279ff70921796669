"""The time zone picker in headless Chromium: choosing a zone puts it in the URL and the cookie,
rewrites the times, keeps the charts (with their event marks) and the live refreshes in it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, Page, expect

from app.viewer_time import fmt_local, zone_label
from tests.browser.conftest import Problems, shot
from tests.browser.fleet_data import node_history, post_batch
from tests.factories import create_token, iso
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]
HOST = "gpu-tz-001"
KOLKATA = ZoneInfo("Asia/Kolkata")


def add_node_with_xid(live: LiveServer) -> datetime:
    """Ten minutes of history on two GPUs and an Xid 79 on GPU 1 two minutes ago (its time)."""
    payload = node_history(HOST, gpus=2, minutes=10)
    occurred = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    payload["events"] = [
        {
            "occurred_at": iso(occurred),
            "kind": "xid",
            "gpu_uuid": payload["gpus"][1]["uuid"],
            "xid": 79,
            "message": "GPU has fallen off the bus.",
        }
    ]
    post_batch(live.url, create_token(live.settings.effective_database_url, HOST), payload)
    return occurred


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_choosing_a_zone_updates_the_url_times_charts_and_refreshes(
    page: Tab, live: LiveServer
) -> None:
    tab, problems = page
    occurred = add_node_with_xid(live)
    tab.goto(f"{live.url}/nodes/{HOST}?range=15m")
    expect(tab.locator(".footer")).to_contain_text("All times UTC")
    expect(tab.locator("table.events")).to_contain_text(occurred.strftime("%Y-%m-%d %H:%M:%SZ"))

    tab.locator(".section-head [data-tz-select]").select_option("Asia/Kolkata")

    tab.wait_for_url(re.compile(r"range=15m&tz=Asia%2FKolkata$"))
    expect(tab.locator(".footer")).to_contain_text("All times Asia/Kolkata (IST, UTC+05:30)")
    expect(tab.locator("table.events")).to_contain_text(fmt_local(occurred, KOLKATA))
    expect(tab.locator("#chart-util_gpu_pct .scatterlayer .trace")).to_have_count(3)  # + events
    expect(tab.locator("#chart-util_gpu_pct .xtitle")).to_have_text("Time (Asia/Kolkata)")
    expect(tab.locator("#chart-util_gpu_pct .shapelayer path")).to_have_count(1)
    shot(tab, "node-page-time-zone")
    first_x = tab.evaluate("document.getElementById('chart-util_gpu_pct').data[0].x[0]")
    assert first_x.endswith("+05:30")
    assert "fw_tz=Asia%2FKolkata" in tab.evaluate("document.cookie")

    # The live partial and the chart refresh both ask in the chosen zone.
    with tab.expect_request(lambda r: f"/nodes/{HOST}/_live" in r.url) as live_request:
        pass
    assert "tz=Asia%2FKolkata" in live_request.value.url
    with tab.expect_response(lambda r: "/samples" in r.url) as samples:
        tab.get_by_role("button", name="Pause refresh").click()
        tab.get_by_role("button", name="Resume refresh").click()
    assert "tz=Asia%2FKolkata" in samples.value.url
    expect(tab.locator("#charts-live")).to_contain_text("Asia/Kolkata")
    expect(tab.locator("#chart-util_gpu_pct .scatterlayer .trace")).to_have_count(3)
    refreshed_x = tab.evaluate("document.getElementById('chart-util_gpu_pct').data[0].x.at(-1)")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+05:30", refreshed_x)
    expect(tab.locator("table.events")).to_contain_text(fmt_local(occurred, KOLKATA))

    # The cookie keeps the choice on a page opened without ?tz=.
    tab.goto(f"{live.url}/nodes/{HOST}")
    expect(tab.locator(".footer")).to_contain_text("All times Asia/Kolkata")
    assert_clean(problems)


@pytest.fixture
def auckland_tab(browser: Browser, live: LiveServer) -> Iterator[Tab]:
    """A page whose browser runs in Pacific/Auckland (not in the picker's list)."""
    context = browser.new_context(timezone_id="Pacific/Auckland")
    tab = context.new_page()
    problems = Problems()
    tab.on(
        "console", lambda m: problems.console_errors.append(m.text) if m.type == "error" else None
    )
    tab.on("pageerror", lambda exc: problems.console_errors.append(str(exc)))
    tab.on(
        "request",
        lambda r: (
            problems.foreign_requests.append(r.url) if not r.url.startswith(live.url) else None
        ),
    )
    yield tab, problems
    context.close()


def test_the_browser_zone_is_offered_and_can_be_chosen(auckland_tab: Tab, live: LiveServer) -> None:
    tab, problems = auckland_tab
    add_node_with_xid(live)
    tab.goto(f"{live.url}/nodes/{HOST}")
    select = tab.locator(".footer [data-tz-select]")
    expect(select.locator("option[value='Pacific/Auckland']")).to_have_text(
        "Pacific/Auckland (this browser)"
    )

    select.select_option("Pacific/Auckland")

    tab.wait_for_url(re.compile(r"\?tz=Pacific%2FAuckland$"))
    label = zone_label(ZoneInfo("Pacific/Auckland"), datetime.now(UTC))
    expect(tab.locator(".footer")).to_contain_text(f"All times {label}")
    expect(tab.locator("#chart-power_w svg.main-svg").first).to_be_attached()
    assert problems.console_errors == [] and problems.foreign_requests == []
