"""Screenshots for the README: ``python -m tests.browser.screenshot [OUT_DIR]`` (default ``docs``).

Starts a server on a throw-away SQLite database, ingests a realistic 16-node fleet through the API
(:mod:`tests.browser.fleet_data`) and saves ``fleet-page.png`` and ``node-page.png``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from app.config import load_settings
from app.migrate import upgrade
from tests.browser import chromium
from tests.browser.fleet_data import seed_fleet
from tests.live_server import live_server


def take(out_dir: Path) -> list[Path]:
    """Seed a fleet, shoot the fleet page and one node page; returns the files written."""
    reason = chromium.missing_reason()
    if reason:
        raise SystemExit(reason)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'screenshot.db'}"
        upgrade(url)
        with live_server(load_settings(database_url=url, data_dir=Path(tmp))) as server:
            seed_fleet(url, server.url)
            with sync_playwright() as playwright:
                browser = chromium.launch(playwright)
                page = browser.new_page(
                    viewport={"width": 1440, "height": 860}, color_scheme="light"
                )
                page.goto(server.url + "/")
                page.wait_for_selector("#ov-grid .ov-node")
                written.append(out_dir / "fleet-page.png")
                page.screenshot(path=written[-1], full_page=True)
                page.goto(server.url + "/nodes/gpu-a-003?range=1h")
                page.wait_for_selector("#chart-temp_c svg.main-svg")
                page.wait_for_timeout(500)
                written.append(out_dir / "node-page.png")
                page.screenshot(path=written[-1], full_page=True)
                browser.close()
    return written


if __name__ == "__main__":
    for path in take(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(path)
