"""``fleetwatch demo`` as a user runs it: a server and a simulated fleet, stopped by Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.live_server import free_port


def test_demo_serves_a_fresh_fleet_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """Also: the demo prints its admin's one-time password, and that password logs in."""
    port = free_port()
    env = {**os.environ, "FLEETWATCH_DATA_DIR": str(tmp_path / "data")}
    env.pop("FLEETWATCH_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "demo", "--port", str(port), "--nodes", "4",
         "--gpus-per-node", "4", "--no-random-faults"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    base = f"http://127.0.0.1:{port}"
    nodes: list[dict[str, object]] = []
    try:
        deadline = time.monotonic() + 60
        password = None
        while password is None and time.monotonic() < deadline:
            found = [ln for ln in list(lines) if "one-time password " in ln]
            password = found[0].rsplit(" ", 1)[1].strip() if found else None
            time.sleep(0.2)
        assert password, "".join(lines)
        login = httpx.post(f"{base}/login", data={"username": "admin", "password": password})
        assert login.status_code == 303, login.text
        cookies = {"fw_session": login.cookies["fw_session"]}
        while time.monotonic() < deadline:
            try:
                nodes = httpx.get(f"{base}/api/v1/nodes", timeout=2, cookies=cookies).json()
            except httpx.HTTPError:
                nodes = []
            if len(nodes) == 4 and all(n["freshness"] == "fresh" for n in nodes):
                break
            time.sleep(0.5)
        assert [n["gpu_count"] for n in nodes] == [4, 4, 4, 4], nodes
        detail = httpx.get(
            f"{base}/api/v1/nodes/{nodes[0]['hostname']}", timeout=5, cookies=cookies
        ).json()
        assert detail["gpus"][0]["latest"]["util_gpu_pct"] is not None
        assert httpx.get(f"{base}/", timeout=5, cookies=cookies).status_code == 200
        assert httpx.get(f"{base}/", timeout=5).status_code == 303  # no login, no fleet
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        proc.stdout.close()
    output = "".join(lines)
    assert proc.returncode == 0, output
    assert f"open {base}/" in output
    assert (tmp_path / "data" / "fleetwatch.db").is_file()
    # The fleet stops before the server, so its last batches were delivered, not spooled.
    leftovers = [p for p in (tmp_path / "data" / "demo" / "spool").rglob("*") if p.is_file()]
    assert leftovers == [], output
    assert "Connection refused" not in output


def _pids_with(fragment: str) -> list[int]:
    """PIDs whose command line contains ``fragment`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if fragment in cmdline:
                found.append(int(entry.name))
    return found


def test_the_simulated_fleet_exits_when_the_demo_is_killed(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "FLEETWATCH_DATA_DIR": str(tmp_path / "data")}
    env.pop("FLEETWATCH_DATABASE_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "demo", "--port", str(port), "--nodes", "2",
         "--no-random-faults"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    marker = f"agents.simfleet --server http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _pids_with(marker), "the demo never started its fleet"
    finally:
        proc.kill()  # SIGKILL: no handler runs in the demo
        proc.wait()
    deadline = time.monotonic() + 15
    while _pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_with(marker) == []
