"""Screenshots for the README: ``python -m tests.browser.screenshot [OUT_DIR]`` (default ``docs``).

Starts a server on a throw-away SQLite database, ingests a realistic 16-node fleet through the API
(:mod:`tests.browser.fleet_data`), applies the default alert rule pack, evaluates it once and saves
``fleet-page.png``, ``node-page.png`` and ``alerts-page.png``.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from playwright.sync_api import sync_playwright

from app.alerts.rulefiles import DEFAULT_RULES_DIR, apply_path
from app.config import load_settings
from app.db import make_engine, make_session_factory, session_scope
from app.migrate import upgrade
from tests.browser import chromium
from tests.browser.fleet_data import seed_fleet
from tests.factories import evaluate_at
from tests.live_server import live_server


def alert_on_defaults(db_url: str) -> None:
    """Apply the shipped default rule pack (as ``fleetwatch rules apply --defaults``) and run one
    evaluation now, so the lost GPU and the two stale agents fire."""
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            apply_path(session, path=DEFAULT_RULES_DIR, defaults=True)
    finally:
        engine.dispose()
    evaluate_at(db_url, datetime.now(UTC))


def take(out_dir: Path) -> list[Path]:
    """Seed a fleet, shoot the fleet page, one node page and the alerts page; returns the files
    written."""
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
            alert_on_defaults(url)
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
                page.goto(server.url + "/alerts")
                page.wait_for_selector(".alerts-table tbody tr")
                written.append(out_dir / "alerts-page.png")
                page.screenshot(path=written[-1], full_page=True)
                browser.close()
    return written


if __name__ == "__main__":
    for path in take(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(path)
