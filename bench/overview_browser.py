"""The browser's work to draw the fleet overview at scale: Chromium (headless, Debian's), the
Performance API and the DevTools protocol's ``Performance.getMetrics``.

Serves an already seeded database (``bench/page_times.py --keep`` prints one: 1,000 nodes ×
8 GPUs) with ``fleetwatch serve`` and, ``--repeat`` times each:

* loads ``/`` (and ``/?view=table``) and reads the navigation timing (response end → DOM
  content loaded → load) and the DevTools metrics: script, layout and style-recalculation
  seconds and the total task time of the main thread;
* runs live refreshes of the grid (``htmx.ajax`` from and into ``#fleet-live``, the request the
  page makes every 5 s): a full one (no version sent) and one as polled (the version sent back:
  204 when nothing changed), reading the same metrics around each, request to settled DOM.

Medians are printed with the machine. The goal (issue "Fleet views at 1,000–5,000 nodes"): the
script time to draw the 1,000-node overview stays ≤ 300 ms.

    python bench/overview_browser.py --db-url URL [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import CDPSession, Page, sync_playwright  # noqa: E402

from bench.page_times import start_server  # noqa: E402
from tests.browser import chromium  # noqa: E402
from tests.live_server import free_port  # noqa: E402

METRICS = ("ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "TaskDuration")
REFRESH_JS = """async (seen) => {
  const live = document.getElementById('fleet-live');
  if (!seen) delete live.dataset.liveVersion;
  const t0 = performance.now();
  await htmx.ajax('GET', '/fleet/_nodes', {source: live, target: live, swap: 'innerHTML'});
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return {wall_ms: performance.now() - t0, cells: document.querySelectorAll('#ov-grid .c').length};
}"""


def metrics(cdp: CDPSession) -> dict[str, float]:
    """The DevTools cumulative durations of this page, in ms."""
    found = cdp.send("Performance.getMetrics")["metrics"]
    return {m["name"]: m["value"] * 1000 for m in found if m["name"] in METRICS}


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


def load(page: Page, cdp: CDPSession, url: str) -> dict[str, Any]:
    """Navigate to ``url``; the navigation timing and the main thread's work, in ms (the
    DevTools counters start again with each document)."""
    page.goto(url, wait_until="load", timeout=120_000)
    nav = page.evaluate(
        """() => { const n = performance.getEntriesByType('navigation')[0];
        return {response_end: n.responseEnd, dom_loaded: n.domContentLoadedEventEnd,
                load: n.loadEventEnd, cells: document.querySelectorAll('#ov-grid .c').length,
                rows: document.querySelectorAll('table.nodes tbody tr').length}; }"""
    )
    return {**nav, **metrics(cdp)}


def refresh(page: Page, cdp: CDPSession, *, seen: bool) -> dict[str, Any]:
    """One live refresh of the region, as the page's 5-s poll makes it: with ``seen``, sending
    the version the region shows (the server answers 204 when nothing changed)."""
    before = metrics(cdp)
    found = page.evaluate(REFRESH_JS, seen)
    return {**found, **delta(metrics(cdp), before)}


def report(name: str, runs: list[dict[str, Any]]) -> None:
    keys = [k for k in runs[0] if isinstance(runs[0][k], int | float)]
    medians = {k: statistics.median(r[k] for r in runs) for k in keys}
    parts = " ".join(f"{k}={v:,.0f}" for k, v in medians.items())
    print(f"{name:28} {parts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-url", required=True, help="a seeded database (page_times --keep)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reason = chromium.missing_reason()
    if reason:
        sys.exit(f"overview_browser: {reason}")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"
    )
    port = free_port()
    server = start_server(args.db_url, port)
    base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as pw:
            browser = chromium.launch(pw)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            load(page, cdp, base + "/")  # warm-up: server caches, fonts, scripts
            report("load / (tiles)", [load(page, cdp, base + "/") for _ in range(args.repeat)])
            report(
                "refresh, full (tiles)",
                [refresh(page, cdp, seen=False) for _ in range(args.repeat)],
            )
            page.evaluate(REFRESH_JS, False)  # the region now holds a version
            report(
                "refresh, as polled (tiles)",
                [refresh(page, cdp, seen=True) for _ in range(args.repeat)],
            )
            table = [load(page, cdp, base + "/?view=table") for _ in range(args.repeat)]
            report("load /?view=table", table)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
    print("ms; ScriptDuration is the script time the goal (≤ 300 ms) is about")


if __name__ == "__main__":
    main()
