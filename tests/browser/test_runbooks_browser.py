"""Runbook pages in headless Chromium: the list and a shipped runbook render with no console
errors and no off-host requests; the editor previews with htmx, saves, and reverts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Problems, shot
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

#: The runbooks the project ships, one row each on /runbooks.
SHIPPED = len(list((Path(__file__).resolve().parents[2] / "runbooks").glob("*.md")))

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]


@pytest.fixture
def site(live: LiveServer, sqlite_url: str) -> Iterator[LiveServer]:
    """The live server (shipped runbooks folder); runbook edits wiped afterwards."""
    yield live
    wipe_alerts(sqlite_url)


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_list_and_view_a_shipped_runbook(page: Tab, site: LiveServer) -> None:
    tab, problems = page
    tab.goto(site.url + "/")
    tab.get_by_role("link", name="Runbooks").click()
    tab.wait_for_url("**/runbooks")

    expect(tab.locator("table.runbooks tbody tr")).to_have_count(SHIPPED)
    shot(tab, "runbooks")
    tab.get_by_role("link", name="gpu-double-bit-ecc", exact=True).click()
    tab.wait_for_url("**/runbooks/gpu-double-bit-ecc")

    article = tab.locator("#runbook")
    expect(article.locator("h1")).to_have_text(
        "Uncorrectable (double-bit) ECC errors: <node.hostname> GPU <gpu.index>"
    )
    expect(article.locator("pre code").first).to_contain_text(
        "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i <gpu.index>"
    )
    expect(tab.locator(".runbook-meta")).to_contain_text("▤ file")
    shot(tab, "runbook")
    assert_clean(problems)


def test_edit_preview_save_and_revert(page: Tab, site: LiveServer) -> None:
    tab, problems = page
    tab.goto(site.url + "/runbooks/gpu-lost/edit")
    editor = tab.locator("#markdown")
    assert editor.input_value().startswith("# GPU lost: {{ node.hostname }} GPU {{ gpu.index }}")

    editor.fill('# Drain {{ node.hostname }}\n\n<img src=x onerror="window.__pwned=1"> **now**')
    tab.get_by_role("button", name="Preview").click()
    preview = tab.locator("#preview article.runbook")
    expect(preview.locator("h1")).to_have_text("Drain <node.hostname>")
    expect(preview.locator("strong")).to_have_text("now")
    expect(preview.locator("img")).to_have_count(0)
    assert tab.url == site.url + "/runbooks/gpu-lost/edit"

    tab.get_by_role("button", name="Save").click()
    tab.wait_for_url("**/runbooks/gpu-lost")
    expect(tab.locator("#runbook h1")).to_have_text("Drain <node.hostname>")
    expect(tab.locator(".runbook-meta")).to_contain_text("✎ edited in UI")
    assert tab.evaluate("window.__pwned === undefined")

    tab.get_by_role("link", name="Edit").click()
    tab.wait_for_url("**/runbooks/gpu-lost/edit")
    tab.get_by_role("button", name="Revert to file").click()
    tab.wait_for_url("**/runbooks/gpu-lost")
    expect(tab.locator("#runbook h1")).to_have_text("GPU lost: <node.hostname> GPU <gpu.index>")
    expect(tab.locator(".runbook-meta")).to_contain_text("▤ file")
    assert_clean(problems)
