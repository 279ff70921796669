"""Browser fixtures: one headless Chromium per session, a live server on SQLite per test, and
pages that record console errors and failed requests."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from app.config import load_settings
from tests.browser import chromium
from tests.dbs import wipe
from tests.live_server import LiveServer

SCREENSHOT_DIR = Path(__file__).resolve().parents[2] / "build" / "screenshots"
"""Where :func:`shot` writes (``build/`` is git-ignored)."""


def shot(page: Page, name: str) -> Path | None:
    """Save a full-page PNG of ``page`` as ``build/screenshots/<name>.png`` (``name`` reduced to
    ``[A-Za-z0-9_.-]``) and return its path; ``None`` when the screenshot fails, which never fails
    the test that asked for it (it is a record of the view, not a check)."""
    path = SCREENSHOT_DIR / (re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") + ".png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=path, full_page=True, timeout=5_000)
    except Exception:  # a screenshot must never fail the test
        return None
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium; skipped where it is not installed, except under ``CI=true``."""
    reason = chromium.missing_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        browser = chromium.launch(playwright)
        yield browser
        browser.close()


@pytest.fixture
def live(sqlite_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A live server on the session's SQLite database, wiped afterwards (SQLite is enough here:
    the page tests cover both backends)."""
    server = LiveServer(load_settings(database_url=sqlite_url, data_dir=tmp_path))
    server.start()
    yield server
    server.stop()
    wipe(sqlite_url)


@dataclass
class Problems:
    """What went wrong in the page: console errors, failed requests, requests that left the
    test server (everything must be served locally)."""

    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)


@pytest.fixture
def page(browser: Browser, live: LiveServer) -> Iterator[tuple[Page, Problems]]:
    """A fresh page (own context, 1440×900) with a :class:`Problems` recorder."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    problems = Problems()
    tab.on(
        "console",
        lambda msg: problems.console_errors.append(msg.text) if msg.type == "error" else None,
    )
    tab.on("pageerror", lambda exc: problems.console_errors.append(str(exc)))
    # net::ERR_ABORTED is the browser cancelling a request itself because the page navigated
    # (a reload while the favicon loads: seen once in CI), not the server failing to answer.
    tab.on(
        "requestfailed",
        lambda req: (
            problems.failed_requests.append(f"{req.url} {req.failure}")
            if "ERR_ABORTED" not in str(req.failure)
            else None
        ),
    )
    tab.on(
        "response",
        lambda res: (
            problems.failed_requests.append(f"{res.url} {res.status}")
            if res.status >= 400
            else None
        ),
    )
    tab.on(
        "request",
        lambda req: (
            problems.foreign_requests.append(req.url)
            if not req.url.startswith((live.url, "data:"))
            else None
        ),
    )
    yield tab, problems
    context.close()
