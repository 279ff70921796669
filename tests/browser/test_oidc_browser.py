"""Single sign-on end to end in Chromium: the login page's button, the separate OIDC provider
process's own authorization form, back to Fleetwatch logged in with the role and teams its
groups map to; then log out. No console error and no CSP violation on Fleetwatch's pages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from app.config import load_settings
from tests.dbs import wipe
from tests.live_server import LiveServer
from tests.oidc_provider import oidc_provider, set_user


@pytest.fixture
def sso(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    with oidc_provider() as issuer:
        settings = load_settings(
            database_url=sqlite_url,
            data_dir=tmp_path,
            oidc_issuer=issuer,
            oidc_client_id="fleetwatch",
            oidc_client_secret="client-secret",
            oidc_group_roles={"gpu-oncall": "responder:team-a"},
        )
        server = LiveServer(settings, as_admin=False)
        server.start()
        yield server, issuer
        server.stop()
    wipe(sqlite_url)


def test_sso_login_in_chromium(browser: Browser, sso: tuple[LiveServer, str]) -> None:
    server, issuer = sso
    set_user(issuer, "olivia", {"preferred_username": "olivia", "groups": ["gpu-oncall"]})
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    tab.on(
        "console", lambda m: errors.append(f"{tab.url}: {m.text}") if m.type == "error" else None
    )
    try:
        tab.goto(f"{server.url}/alerts")
        assert tab.url.startswith(f"{server.url}/login?next=")  # not logged in: the login page
        tab.click("#sso-login")
        tab.wait_for_url(f"{issuer}/**")
        tab.fill("input[name=sub]", "olivia")
        tab.get_by_role("button", name="Authorize").click()
        tab.wait_for_url(f"{server.url}/alerts")
        assert tab.locator("#whoami").inner_text() == "olivia"
        assert tab.locator("#whoami").get_attribute("title") == "responder"
        cookie = next(c for c in context.cookies() if c["name"] == "fw_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        # The logout ends the provider's session too (it asks to confirm), then comes back.
        tab.click("#logout")
        tab.wait_for_url(f"{issuer}/oauth2/end_session?**")
        tab.get_by_role("button", name="End session").click()
        tab.wait_for_url(f"{server.url}/login")
        tab.goto(f"{server.url}/alerts")
        assert tab.url.startswith(f"{server.url}/login?next=")
    finally:
        context.close()
    assert [e for e in errors if e.startswith(server.url)] == []
