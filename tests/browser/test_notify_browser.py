"""Notification pages in headless Chromium: the pages load with no console errors and no
off-host requests; a generic-webhook channel is created through the form, its test message's
result appears inline (htmx) once the worker has sent it; the delivery log's status filter
updates the list and the URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.config import Settings, load_settings
from app.db import make_engine, make_session_factory
from app.notify.jobs import NotifyJobs
from tests.browser.conftest import Problems, shot
from tests.live_server import LiveServer
from tests.notify_helpers import receiver, wipe_notify

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]
SECRET_PATH = "/hooks/B0SECRET/token-SECRET"


@pytest.fixture
def live(sqlite_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A live server on SQLite whose SSRF guard lets webhooks reach 127.0.0.1."""
    settings = load_settings(
        database_url=sqlite_url, data_dir=tmp_path, notify_allow_hosts=["127.0.0.1"]
    )
    server = LiveServer(settings)
    server.start()
    yield server
    server.stop()
    wipe_notify(sqlite_url)


def tick(settings: Settings, url: str) -> int:
    """One delivery worker pass; rows delivered."""
    engine = make_engine(url)
    jobs = NotifyJobs(settings, make_session_factory(engine))
    try:
        return jobs.tick().delivered
    finally:
        jobs.close()
        engine.dispose()


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    # Chromium fetches the favicon on its own and aborts that fetch when the page navigates
    # on (history restore): not a request of the page.
    aborted_icon = [
        f for f in problems.failed_requests if f.endswith("favicon.svg net::ERR_ABORTED")
    ]
    assert [f for f in problems.failed_requests if f not in aborted_icon] == []
    assert problems.foreign_requests == []


def test_create_a_channel_send_a_test_message_and_filter_its_log(
    page: Tab, live: LiveServer, sqlite_url: str
) -> None:
    tab, problems = page
    tab.goto(live.url + "/")
    tab.get_by_role("link", name="Notifications").click()
    tab.wait_for_url("**/notifications")
    expect(tab.locator("#no-channels")).to_have_text("No channels yet.")
    shot(tab, "notifications")

    tab.get_by_role("link", name="Generic webhook").click()
    tab.wait_for_url("**/notifications/channels/new?kind=webhook")
    with receiver() as hook:
        tab.get_by_label("Name").fill("ops hook")
        tab.get_by_label("Team").fill("vision")
        tab.get_by_label("URL").fill(hook.url + SECRET_PATH)
        tab.get_by_label("HMAC signing key (optional)").fill("SECRET-key")
        tab.get_by_role("button", name="Create channel").click()
        tab.wait_for_url("**/notifications#channel-*")
        row = tab.locator("tr.notify-channel")
        expect(row.locator("th")).to_have_text("ops hook")
        expect(row.locator(".url-masked")).to_have_text(f"http://127.0.0.1:{hook.port}/…")
        assert "SECRET" not in tab.content()

        row.get_by_role("button", name="Send test message").click()
        expect(row.locator(".test-result")).to_contain_text("test message queued")
        assert tick(live.settings, sqlite_url) == 1
        expect(row.locator(".test-result")).to_contain_text(
            "test message delivered (HTTP 200)", timeout=10_000
        )
        assert len(hook.requests) == 1

    row.locator("th a").click()
    tab.wait_for_url("**/notifications/channels/*")
    log_url = tab.url
    expect(tab.locator("tr.delivery-row")).to_have_count(1)
    expect(tab.locator("tr.delivery-row td").nth(2)).to_have_text("✓ delivered")
    shot(tab, "notification-channel-log")

    tab.get_by_label("Status").select_option("failed")
    tab.wait_for_url("**?status=failed")
    expect(tab.locator("#delivery-count")).to_have_text("0 deliveries failed")
    expect(tab.locator("tr.delivery-row")).to_have_count(0)
    tab.go_back()
    tab.wait_for_url(log_url)
    expect(tab.locator("tr.delivery-row")).to_have_count(1)
    assert_clean(problems)


def test_bad_url_is_explained_next_to_the_field(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    tab.goto(live.url + "/notifications/channels/new?kind=slack")
    tab.get_by_label("Name").fill("chat")
    tab.get_by_label("URL").fill("http://169.254.169.254/latest/meta-data")
    tab.get_by_role("button", name="Create channel").click()
    expect(tab.locator("#url-error")).to_contain_text(
        "url: host 169.254.169.254 resolves to 169.254.169.254, a cloud metadata address"
    )
    expect(tab.get_by_label("URL")).to_have_value("")
    expect(tab.get_by_label("Name")).to_have_value("chat")
    # The refused form answers 400: the one failed request (and its console line) allowed.
    assert problems.console_errors == [
        "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    ]
    assert [r.rsplit(" ", 1)[1] for r in problems.failed_requests] == ["400"]
    assert problems.foreign_requests == []


def test_routes_edit_form_and_paused_log_load_cleanly(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    made = httpx.post(
        f"{live.url}/api/v1/channels",
        json={"name": "pager", "kind": "webhook", "url": "http://127.0.0.1:9" + SECRET_PATH},
    )
    assert made.status_code == 201
    cid = made.json()["id"]

    tab.goto(live.url + "/notifications")
    tab.get_by_role("link", name="Add a route").click()
    tab.wait_for_url("**/notifications/routes/new")
    tab.get_by_label("Channel").select_option(label="pager")
    tab.get_by_label("Team").fill("ml")
    tab.get_by_label("critical").check()
    tab.get_by_role("button", name="Create route").click()
    tab.wait_for_url("**/notifications#routes")
    route = tab.locator("table.notify-routes tbody tr")
    expect(route.locator("td").first).to_have_text("critical")
    expect(tab.locator("#routes h3")).to_have_text("ml")
    shot(tab, "notification-routes")

    tab.locator(f"#channel-{cid}").get_by_role("link", name="Edit").click()
    tab.wait_for_url(f"**/notifications/channels/{cid}/edit")
    expect(tab.get_by_label("URL")).to_have_value("")
    expect(tab.get_by_label("URL")).to_have_attribute("placeholder", "unchanged unless filled")
    expect(tab.get_by_label("Name")).to_have_value("pager")
    assert "SECRET" not in tab.content()

    tab.goto(f"{live.url}/notifications/channels/{cid}")
    tab.get_by_role("button", name="Pause refresh").click()
    expect(tab.locator("#live-status")).to_have_attribute("data-state", "paused")
    tab.goto(f"{live.url}/notifications/channels/{cid}/delete")
    expect(tab.get_by_role("heading", level=1)).to_have_text("Delete channel pager?")
    tab.get_by_role("button", name="Delete channel").click()
    tab.wait_for_url("**/notifications")
    expect(tab.locator("#no-channels")).to_have_text("No channels yet.")
    assert_clean(problems)
