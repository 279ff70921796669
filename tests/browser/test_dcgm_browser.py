"""The ``/dcgm`` page in headless Chromium: a down endpoint first with its error, a pulled
node's link, skipped series with reasons, DCGM blanks and pods; no console errors and no
off-host requests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from app.config import load_settings
from app.db import session_scope
from app.dcgm import service as dcgm_service
from app.dcgm.parse import parse
from app.dcgm.targets import Target
from app.dcgm.translate import translate
from tests.dbs import session_factory, wipe
from tests.live_server import LiveServer
from tests.shared_fixtures import fixture_path

pytestmark = pytest.mark.browser

PULLED = "http://10.0.0.5:9400/metrics"
DOWN = "http://10.0.0.6:9400/metrics"


@pytest.fixture
def site(sqlite_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    settings = load_settings(
        database_url=sqlite_url, data_dir=tmp_path, dcgm_endpoints=f"{PULLED},{DOWN}"
    )
    server = LiveServer(settings)
    server.start()
    yield server
    server.stop()
    wipe(sqlite_url)


def test_the_endpoints_page_puts_the_down_one_first_and_explains_the_skipped(
    browser: Browser, site: LiveServer, sqlite_url: str
) -> None:
    now = datetime.now(UTC)
    text = fixture_path("dcgm-exporter/a100-mig-1g5gb-gpu-and-gi-metrics.prom").read_text()
    text += fixture_path("dcgm-exporter/readme-quickstart-blank-sentinel-memtemp.prom").read_text()
    target = Target(url=PULLED)
    translation = translate(parse(text), target=target, scraped_at=now)
    with session_factory(sqlite_url) as factory:
        with session_scope(factory) as session:
            dcgm_service.store_scrape(
                session,
                target=target,
                translation=translation,
                scraped_at=now,
                duration_s=0.02,
                received_at=now,
                policy=dcgm_service.IngestPolicy(),
            )
        with session_scope(factory) as session:
            dcgm_service.record_failure(
                session,
                url=DOWN,
                error="ConnectError: [Errno 111] Connection refused",
                scraped_at=now,
                duration_s=0.001,
            )

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    foreign: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("request", lambda r: foreign.append(r.url) if not r.url.startswith(site.url) else None)
    tab.goto(site.url + "/")
    tab.get_by_role("link", name="dcgm-exporter endpoints").click()
    tab.wait_for_url("**/dcgm")

    rows = tab.locator("#dcgm-endpoints tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-url", DOWN)
    expect(rows.nth(0).locator(".endpoint-error")).to_have_text(
        "ConnectError: [Errno 111] Connection refused"
    )
    pulled = rows.nth(1)
    expect(pulled.get_by_role("link", name="gpu-host-01")).to_be_visible()
    expect(pulled).to_contain_text("1 GPU")
    expect(pulled).to_contain_text(f"{translation.series_stored} of {translation.series_total}")
    expect(pulled).to_contain_text(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE ×2: a profiling (DCP) ratio or rate"
    )
    expect(pulled).to_contain_text(
        "DCGM_FI_DEV_MEMORY_TEMP ×1 null: not supported (DCGM_INT64_BLANK+2)"
    )
    pulled.get_by_role("link", name="gpu-host-01").click()
    tab.wait_for_url("**/nodes/gpu-host-01")
    expect(tab.locator("main")).to_contain_text("dcgm-exporter")
    assert errors == [] and foreign == []
    context.close()
