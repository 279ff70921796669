"""The alert pages in headless Chromium, with alerts made by the real evaluator: no console
errors or off-host requests, a filter change updates the URL and the list, acknowledging marks
the alert, and a silence is created from "silence like this" and expired."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.app.test_alert_pages import seed
from tests.browser.conftest import Problems, shot
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]


@pytest.fixture
def alerts(live: LiveServer) -> Iterator[dict[str, Any]]:
    """:func:`seed`'s alerts on the live server's database (alert tables wiped after)."""
    url = live.settings.effective_database_url
    data = seed(url)
    yield data
    wipe_alerts(url)


def set_enabled(live: LiveServer, name: str, *, enabled: bool) -> None:
    """Enable or disable a rule through the rule service (as the API would)."""
    from app.alerts import store
    from app.db import make_engine, make_session_factory, session_scope

    engine = make_engine(live.settings.effective_database_url)
    with session_scope(make_session_factory(engine)) as session:
        store.set_enabled(session, name=name, enabled=enabled)
    engine.dispose()


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_alert_pages_load_without_errors(page: Tab, live: LiveServer, alerts: Any) -> None:
    tab, problems = page
    tab.goto(live.url + "/")
    badge = tab.locator(".mainnav .nav-badge")
    expect(badge).to_have_text("1 firing")
    expect(tab.locator("#overview-alerts")).to_contain_text("1 firing")
    tab.locator(".mainnav").get_by_role("link", name="Alerts").click()
    tab.wait_for_url("**/alerts")
    expect(tab.locator(".alerts-table tbody tr")).to_have_count(2)
    shot(tab, "alerts")

    for path in ("/alerts?tab=resolved", "/silences", "/rules", "/rules/new", "/rules/hot/edit"):
        tab.goto(live.url + path)
        expect(tab.locator("h1")).to_be_visible()
        shot(tab, "alerts-page" + path)
    tab.goto(live.url + "/alerts")
    tab.locator(".alerts-table").get_by_role("link", name="hot").click()
    expect(tab.locator("h1")).to_contain_text("hot on node-a GPU 1")
    shot(tab, "alert-detail")
    assert tab.evaluate("window.__pwned === undefined")
    assert_clean(problems)


def test_filter_change_updates_url_and_list(page: Tab, live: LiveServer, alerts: Any) -> None:
    tab, problems = page
    tab.goto(live.url + "/alerts")

    tab.locator("#alert-severity").select_option("warning")
    tab.wait_for_url("**/alerts?severity=warning")
    expect(tab.locator(".alerts-table tbody tr")).to_have_count(1)
    expect(tab.locator(".alerts-table tbody tr")).to_contain_text("warm")

    tab.locator("#alert-q").fill("nothing-like-this")
    tab.wait_for_url("**/alerts?severity=warning&q=nothing-like-this")
    expect(tab.locator("#no-alerts")).to_be_visible()
    tab.reload()
    expect(tab.locator("#alert-severity")).to_have_value("warning")
    expect(tab.locator("#no-alerts")).to_be_visible()
    assert_clean(problems)


def test_list_refreshes_unless_paused(page: Tab, live: LiveServer, alerts: Any) -> None:
    tab, problems = page
    tab.goto(live.url + "/alerts")
    expect(tab.locator(".alerts-table tbody tr")).to_have_count(2)
    tab.get_by_role("button", name="Pause refresh").click()
    expect(tab.locator("#live-status")).to_have_attribute("data-state", "paused")

    set_enabled(live, "warm", enabled=False)
    tab.wait_for_timeout(6_000)
    expect(tab.locator(".alerts-table tbody tr")).to_have_count(2)
    tab.get_by_role("button", name="Resume refresh").click()
    expect(tab.locator(".alerts-table tbody tr")).to_have_count(1, timeout=12_000)
    expect(tab.locator("#live-status")).to_have_attribute("data-state", "live")
    assert_clean(problems)


def test_rule_editor_previews_then_creates(page: Tab, live: LiveServer, alerts: Any) -> None:
    tab, problems = page
    tab.goto(live.url + "/rules")
    tab.get_by_role("link", name="New rule").click()
    tab.get_by_label("Rule (YAML)").fill(
        "name: very-hot\nfor: 1m\ncondition:\n  kind: threshold\n  target: gpu\n"
        "  metric: temp_c\n  op: '>'\n  threshold: 80\n"
    )
    tab.get_by_role("button", name="Preview").click()
    expect(tab.locator(".preview-table tbody tr")).to_have_count(1)
    expect(tab.locator(".preview-table")).to_contain_text("node-a GPU 1")
    expect(tab.locator(".preview-table")).to_contain_text("pending")

    tab.get_by_role("button", name="Create").click()
    tab.wait_for_url("**/rules")
    expect(tab.locator('tr[data-rule="very-hot"]')).to_contain_text("enabled")
    shot(tab, "rules")
    assert_clean(problems)


def test_ack_form_shows_the_acked_marker(page: Tab, live: LiveServer, alerts: Any) -> None:
    tab, problems = page
    tab.goto(live.url + "/alerts?tab=firing")
    tab.locator(".alerts-table").get_by_role("link", name="hot").click()

    tab.get_by_label("Owner").fill("alice")
    tab.get_by_label("Note").fill("replacing the fan")
    tab.get_by_role("button", name="Acknowledge").click()

    expect(tab.locator("#alert-state .marker-acked")).to_be_visible()
    expect(tab.locator(".ack-list")).to_contain_text("alice")
    expect(tab.locator(".ack-list")).to_contain_text("replacing the fan")
    tab.goto(live.url + "/alerts")
    expect(tab.locator(".alerts-table .marker-acked")).to_have_count(1)
    assert_clean(problems)


def test_create_and_expire_a_silence(page: Tab, live: LiveServer, alerts: Any) -> None:
    tab, problems = page
    tab.goto(live.url + "/alerts?tab=firing")
    tab.locator(".alerts-table").get_by_role("link", name="hot").click()
    tab.get_by_role("link", name="Silence like this…").click()

    expect(tab.locator("#would-mute")).to_have_text("These matchers mute 1 active alert now.")
    tab.get_by_label("Created by").fill("bob")
    tab.get_by_label("Comment").fill("maintenance")
    tab.get_by_role("button", name="Create silence").click()
    tab.wait_for_url("**/silences")
    expect(tab.locator("#active-silences tbody tr")).to_have_count(1)
    expect(tab.locator("#active-silences")).to_contain_text('alertname="hot"')
    shot(tab, "silences")

    tab.goto(live.url + "/alerts")
    expect(tab.locator(".alerts-table .marker-silenced")).to_have_count(1)
    tab.goto(live.url + "/silences")
    tab.locator("#active-silences").get_by_role("button", name="Expire silence").click()
    expect(tab.locator("#no-active-silences")).to_be_visible()
    expect(tab.locator("#expired-silences tbody tr")).to_have_count(1)
    assert_clean(problems)
