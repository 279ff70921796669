"""The default rule pack on a simulated fleet pushing over real HTTP to a server whose own
scheduled evaluator runs every second: GPU lost, Xid 79, thermal throttling and agent stop fire,
and resolve when they clear. Prints the time from each injected fault to firing.

Health's throttle window is 10 s here (the setting's default is 60 s): throttling then counts
once it held 8 s instead of 48 s, so the thermal fault can end sooner; and the pack's
gpu-thermal-throttling keeps firing 10 s after it clears instead of 30 s."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from agents.fleetspec import FleetNode
from agents.simfleet import SimFleet
from app.main import create_app
from tests.admin_harness import AsTestAdmin
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import create_token, wipe_alerts
from tests.live_server import free_port
from tests.rule_packs import apply_edited_default_rules

#: gpu-thermal-throttling's `keep_firing_for` (the rule's, unique in gpu.yaml) at 10 s.
THERMAL_KEEP_FIRING_10S = (
    "gpu.yaml",
    "    keep_firing_for: 30s\n    condition:\n      kind: health\n      target: gpu\n"
    "      states: [degraded, unhealthy]\n      codes: [thermal_throttle]\n",
    "    keep_firing_for: 10s\n    condition:\n      kind: health\n      target: gpu\n"
    "      states: [degraded, unhealthy]\n      codes: [thermal_throttle]\n",
)


@pytest.fixture
def server_url(sqlite_url: str, tmp_path: Path) -> Iterator[str]:
    """A server with its scheduled jobs on (alert evaluation every 1 s, nodes stale after
    5 s, a 10-s throttle window) and the default rule pack applied (thermal throttling kept
    firing 10 s), on the demo's default backend (SQLite)."""
    settings = make_settings(
        sqlite_url,
        tmp_path,
        alert_eval_interval_s=1,
        stale_after_s=5,
        health_throttle_window_s=10,
    )
    apply_edited_default_rules(settings, tmp_path, [THERMAL_KEEP_FIRING_10S])
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            AsTestAdmin(create_app(settings)), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)
    wipe_alerts(sqlite_url)
    wipe(sqlite_url)


def alert_key(alert: dict[str, object]) -> tuple[str, str]:
    """(rule, hostname[/gpu_index])."""
    labels = alert["labels"]
    assert isinstance(labels, dict)
    where = labels["hostname"] + (f"/{labels['gpu_index']}" if "gpu_index" in labels else "")
    return str(alert["rule"]), where


def test_default_rules_fire_on_injected_faults_and_resolve_when_they_clear(
    server_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    hosts = {"hgx-001": 8, "hgx-002": 8, "pcie-001": 4, "pcie-002": 4}
    nodes = [
        FleetNode(h, create_token(sqlite_url, h), n, {"cluster": "e2e"}) for h, n in hosts.items()
    ]
    fleet = SimFleet(
        nodes,
        server_url=server_url,
        spool_root=tmp_path / "spool",
        interval_s=0.5,
        batch_interval_s=1.0,
        agent_options={"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0},
    )
    expected_firing = {
        ("gpu-lost", "hgx-001/2"),
        ("gpu-critical-xid", "hgx-002/1"),
        ("gpu-lost", "hgx-002/1"),
        ("gpu-thermal-throttling", "pcie-001/0"),
        ("node-agent-stale", "pcie-002"),
    }
    expected_resolved = {
        ("gpu-lost", "hgx-001/2"),
        ("gpu-lost", "hgx-002/1"),
        ("gpu-thermal-throttling", "pcie-001/0"),
        ("node-agent-stale", "pcie-002"),
    }
    fleet.start()
    fired: dict[tuple[str, str], float] = {}
    resolved: dict[tuple[str, str], float] = {}
    try:
        time.sleep(4.0)  # every node reports, alerts settle
        quiet = httpx.get(f"{server_url}/api/v1/alerts", timeout=10).json()
        injected = time.monotonic()
        fleet.inject("hgx-001", "gpu_lost", 2, 15.0)
        fleet.inject("hgx-002", "xid", 1, 15.0, 79)
        # ~50 s to reach 87 °C, 8 s more to fill the throttle window: ~20 s to spare.
        fleet.inject("pcie-001", "thermal_throttle", 0, 80.0)
        fleet.inject("pcie-002", "agent_stop", None, 15.0)
        deadline = injected + 280
        while time.monotonic() < deadline and not (
            expected_firing <= set(fired) and expected_resolved <= set(resolved)
        ):
            alerts = httpx.get(
                f"{server_url}/api/v1/alerts",
                params={"state": ["firing", "resolved"]},
                timeout=10,
            ).json()
            for alert in alerts:
                key, at = alert_key(alert), time.monotonic() - injected
                if alert["fired_at"] is not None:
                    fired.setdefault(key, at)
                if alert["state"] == "resolved":
                    resolved.setdefault(key, at)
            time.sleep(0.5)
    finally:
        fleet.stop(timeout_s=20)

    for key in sorted(fired):
        end = f", resolved at +{resolved[key]:.1f} s" if key in resolved else ""
        print(f"{key[0]} on {key[1]}: firing at +{fired[key]:.1f} s after injection{end}")
    assert quiet == []
    assert expected_firing <= set(fired)
    assert expected_resolved <= set(resolved)
