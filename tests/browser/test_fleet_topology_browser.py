"""The fleet topology page in headless Chromium: local assets only, filters in the URL, pausable
htmx refresh."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.app.topology_drift_data import drop_nic, node_payload, set_link
from tests.browser.conftest import Problems, shot
from tests.browser.fleet_data import post_batch
from tests.factories import create_token
from tests.live_server import LiveServer

pytestmark = pytest.mark.browser

Tab = tuple[Page, Problems]
POD = {"ib_pod": "pod-01"}


def add(live: LiveServer, payload: dict[str, Any]) -> None:
    token = create_token(live.settings.effective_database_url, payload["node"]["hostname"])
    post_batch(live.url, token, payload)


def seed(live: LiveServer) -> None:
    def odd(topology: dict[str, Any]) -> None:
        set_link(topology, "GPU3", "GPU5", "NV6")
        drop_nic(topology, "NIC4")

    for i in range(1, 4):
        add(live, node_payload(f"dgx-{i:02d}", labels=POD))
    add(live, node_payload("dgx-04", labels=POD, alter=odd))


def assert_clean(problems: Problems) -> None:
    assert problems.console_errors == []
    assert problems.failed_requests == []
    assert problems.foreign_requests == []


def test_topology_page_loads_without_errors_and_a_kind_filter_updates_the_url(
    page: Tab, live: LiveServer
) -> None:
    tab, problems = page
    seed(live)

    tab.goto(live.url + "/")
    tab.get_by_role("link", name="Topology").click()
    tab.wait_for_url("**/topology")
    expect(tab.locator(".drift-list tbody tr")).to_have_count(2)
    shot(tab, "fleet-topology-drift")
    tab.wait_for_function("() => window.htmx !== undefined")  # a function: no eval() (CSP)

    tab.locator("#drift-kind").select_option("nic_missing")

    tab.wait_for_url("**/topology?kind=nic_missing")
    expect(tab.locator(".drift-list tbody tr")).to_have_count(1)
    expect(tab.locator(".drift-list")).to_contain_text("mlx5_4 missing (present on 3 of 4 nodes)")
    expect(tab.locator(".drift-list a[href='/nodes/dgx-04/topology']")).to_be_visible()
    tab.reload()
    expect(tab.locator("#drift-kind")).to_have_value("nic_missing")
    expect(tab.locator(".drift-list tbody tr")).to_have_count(1)
    assert_clean(problems)


def test_paused_refresh_keeps_the_list_until_resumed(page: Tab, live: LiveServer) -> None:
    tab, problems = page
    for i in range(1, 4):
        add(live, node_payload(f"dgx-{i:02d}", labels=POD))
    tab.goto(live.url + "/topology")
    expect(tab.locator("#no-drift")).to_contain_text("Every node matches its group.")
    tab.get_by_role("button", name="Pause refresh").click()

    add(live, node_payload("dgx-04", labels=POD, down_nics=("mlx5_2",)))
    tab.wait_for_timeout(6_000)
    expect(tab.locator(".drift-list")).to_have_count(0)
    tab.get_by_role("button", name="Resume refresh").click()

    expect(tab.locator(".drift-list")).to_contain_text(
        "mlx5_2: port state ACTIVE expected (3 of 4 nodes), DOWN here", timeout=15_000
    )
    assert_clean(problems)
