"""The one-click acknowledgement page in Chromium: opening the link changes nothing, the
button (reached by keyboard) acknowledges, no console errors, nothing fetched off the server."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page

from app.db import make_engine, make_session_factory
from app.notify.jobs import signer_for
from tests.browser.conftest import Problems
from tests.live_server import LiveServer
from tests.notify_helpers import Alerts, wipe_notify


def test_the_ack_link_page_acknowledges_on_the_button_only(
    page: tuple[Page, Problems],
    live: LiveServer,
    sqlite_url: str,
) -> None:
    tab, problems = page
    engine = make_engine(sqlite_url)
    try:
        alert_id = Alerts(make_session_factory(engine)).transition("gpu-lost", "n1", "firing")
        link = signer_for(live.settings).url(live.url, alert_id=alert_id, fingerprint="n1")
        tab.goto(link)
        assert tab.get_by_role("heading", name="Acknowledge alert").is_visible()
        api = f"{live.url}/api/v1/alerts/{alert_id}"
        assert httpx.get(api).json()["acked"] is False
        button = tab.get_by_role("button", name="Acknowledge this alert")
        button.focus()
        tab.keyboard.press("Enter")
        tab.get_by_role("status").filter(has_text="Acknowledged").wait_for()
        assert httpx.get(api).json()["acked"] is True
        assert problems.console_errors == []
        assert problems.failed_requests == []
        assert problems.foreign_requests == []
    finally:
        engine.dispose()
        wipe_notify(sqlite_url)
