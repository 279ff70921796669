"""Headless Debian Chromium for the browser tests and the screenshot script (never a downloaded
browser: ``playwright install`` is not used)."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser, Playwright

CHROMIUM = Path(os.environ.get("FLEETWATCH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when Chromium is installed."""
    if CHROMIUM.exists():
        return None
    return (
        f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set FLEETWATCH_CHROMIUM)"
    )


def launch(playwright: Playwright) -> Browser:
    """Start the system Chromium, headless."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
