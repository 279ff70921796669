"""Notifications end to end: a simulated fleet pushes over real HTTP to a server whose own
scheduled jobs evaluate rules and send the outbox; faults injected into the fleet reach a local
webhook receiver as firing and then resolved notices, each exactly once. And ``fleetwatch demo
--webhook URL --webhook-secret S`` as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import uvicorn

from agents.fleetspec import FleetNode
from agents.simfleet import SimFleet
from app.access.roles import Role
from app.config import Settings
from app.demo import add_webhook, apply_default_rules
from app.main import create_app
from app.notify.channels.webhook import verify_signature
from tests.access_helpers import add_token
from tests.admin_harness import AsTestAdmin
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import create_token
from tests.live_server import free_port
from tests.notify_helpers import receiver, wipe_notify

SECRET_PATH = "/hook/e2e-SECRET-path"


def demo_settings(url: str, tmp_path: Path, *, stale_after_s: float = 5) -> Iterator[Settings]:
    """Settings for a server whose jobs evaluate every second and mark nodes stale after
    ``stale_after_s`` (5 s), with webhooks to loopback allowed; the database wiped after."""
    yield make_settings(
        url,
        tmp_path,
        alert_eval_interval_s=1,
        stale_after_s=stale_after_s,
        notify_allow_hosts=["127.0.0.1"],
    )
    wipe_notify(url)
    wipe(url)


@pytest.fixture
def settings(sqlite_url: str, tmp_path: Path) -> Iterator[Settings]:
    yield from demo_settings(sqlite_url, tmp_path)


def serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
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
    return server, thread, f"http://127.0.0.1:{port}"


def notices(bodies: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    """(alertname, where, status) of every alert in every body, in arrival order."""
    out = []
    for body in bodies:
        alerts = body["alerts"]
        assert isinstance(alerts, list)
        for a in alerts:
            labels = a["labels"]
            where = labels["hostname"] + (
                f"/{labels['gpu_index']}" if "gpu_index" in labels else ""
            )
            out.append((labels["alertname"], where, a["status"]))
    return out


def test_injected_faults_reach_the_webhook_firing_then_resolved_exactly_once(
    settings: Settings, sqlite_url: str, tmp_path: Path
) -> None:
    apply_default_rules(settings)
    with receiver() as hook:
        add_webhook(settings, url=hook.url + SECRET_PATH, secret="e2e-signing-key")
        server, thread, url = serve(settings)
        hosts = {"hgx-001": 8, "pcie-001": 4}
        nodes = [
            FleetNode(h, create_token(sqlite_url, h), n, {"cluster": "e2e", "team": "vision"})
            for h, n in hosts.items()
        ]
        fleet = SimFleet(
            nodes,
            server_url=url,
            spool_root=tmp_path / "spool",
            interval_s=0.5,
            batch_interval_s=1.0,
            agent_options={"backoff_base_s": 0.2, "backoff_cap_s": 1.0},
        )
        wanted = [
            ("gpu-lost", "hgx-001/2", "firing"),
            ("gpu-lost", "hgx-001/2", "resolved"),
            ("node-agent-stale", "pcie-001", "firing"),
            ("node-agent-stale", "pcie-001", "resolved"),
        ]
        fleet.start()
        try:
            time.sleep(4.0)
            fleet.inject("hgx-001", "gpu_lost", 2, 12.0)
            fleet.inject("pcie-001", "agent_stop", None, 12.0)
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and not set(wanted) <= set(notices(hook.bodies())):
                time.sleep(0.5)
            time.sleep(3.0)  # anything sent twice would arrive by now
        finally:
            fleet.stop(timeout_s=20)
            server.should_exit = True
            thread.join(timeout=15)
        got = [n for n in notices(hook.bodies()) if n in wanted]
        requests = list(hook.requests)
    assert sorted(got) == sorted(wanted)  # each exactly once
    for alert in ("hgx-001/2", "pcie-001"):
        assert [s for _, where, s in got if where == alert] == ["firing", "resolved"]
    for request in requests:
        assert request.path == SECRET_PATH
        assert verify_signature(
            "e2e-signing-key",
            request.headers["X-Fleetwatch-Timestamp"],
            request.body,
            request.headers["X-Fleetwatch-Signature"],
            now=datetime.now(UTC),
        )


def test_demo_with_webhook_adds_a_catch_all_channel_and_hides_its_url(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "FLEETWATCH_DATA_DIR": str(tmp_path / "data")}
    env.pop("FLEETWATCH_DATABASE_URL", None)
    with receiver() as hook:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "demo", "--port", str(port), "--nodes", "2",
             "--gpus-per-node", "2", "--no-random-faults",
             "--webhook", hook.url + SECRET_PATH, "--webhook-secret", "demo-SECRET-key"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}/api/v1"
        try:
            channels: list[dict[str, object]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            # The demo's database, migrated by now: an editor token to read and test with.
            token = add_token(
                f"sqlite:///{tmp_path / 'data' / 'fleetwatch.db'}", "demo-e2e", Role.editor, None
            )
            auth = {"Authorization": f"Bearer {token}"}
            while time.monotonic() < deadline and not channels:
                try:
                    channels = httpx.get(f"{base}/channels", timeout=2, headers=auth).json()
                except httpx.HTTPError:
                    time.sleep(0.5)
            [channel] = channels
            assert (channel["name"], channel["kind"], channel["team"]) == (
                "demo-webhook",
                "webhook",
                None,
            )
            assert channel["url_masked"] == f"{hook.url}/…"
            [route] = httpx.get(f"{base}/routes", timeout=5, headers=auth).json()
            assert (route["team"], route["severities"]) == (None, [])
            httpx.post(f"{base}/channels/{channel['id']}/test", timeout=5, headers=auth)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not hook.requests:
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                output, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
        [request] = hook.requests
    assert request.json()["fleetwatch"]["is_test"] is True
    assert verify_signature(
        "demo-SECRET-key",
        request.headers["X-Fleetwatch-Timestamp"],
        request.body,
        request.headers["X-Fleetwatch-Signature"],
        now=datetime.now(UTC),
    )
    assert proc.returncode == 0, output
    assert "SECRET" not in output
    assert f"every team's alerts go to {hook.url}/…" in output
