"""The README screenshot of the node topology page: ``python -m tests.browser.screenshot_topology
[OUT_DIR]`` (default ``docs``) writes ``topology-page.png``.

Starts a server on a throw-away SQLite database and ingests, through the API, one HGX H100 node
laid out like the 8-GPU, 8-NIC capture in ``../shared/fixtures/topo`` (two NICs behind the PCIe
switch of GPU 0, 2, 4 and 6; NV18 through NVSwitches) with NVLink 3 of GPU 5 down.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

from app.config import load_settings
from app.migrate import upgrade
from tests.app.section_factories import nvlinks
from tests.browser import chromium
from tests.browser.fleet_data import post_batch
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import live_server

HOSTNAME = "gpu-a-003"


def hgx_topology(gpus: list[dict[str, Any]], at: datetime) -> dict[str, Any]:
    """8 GPUs (NUMA 0: GPU0-3, NUMA 1: GPU4-7), NV18 pairs, NIC 2k and 2k+1 PIX to GPU 2k (k
    even), NODE to the other GPUs of their NUMA node and SYS across."""
    devices: list[dict[str, Any]] = [
        {
            "id": f"GPU{g['index']}",
            "kind": "gpu",
            "gpu_uuid": g["uuid"],
            "pci_bus_id": g["pci_bus_id"],
            "numa_node": g["index"] // 4,
            "cpu_affinity": "0-47,96-143" if g["index"] < 4 else "48-95,144-191",
        }
        for g in gpus
    ]
    devices += [
        {"id": f"NIC{n}", "kind": "nic", "name": f"mlx5_{n}", "numa_node": n // 4} for n in range(8)
    ]
    links = [
        {"a": f"GPU{a}", "b": f"GPU{b}", "type": "NV18"} for a in range(8) for b in range(a + 1, 8)
    ]
    ids = [f"GPU{i}" for i in range(8)] + [f"NIC{n}" for n in range(8)]

    def switch(device: str) -> int | None:
        index = int(device[3:])
        if device.startswith("GPU"):
            return index if index % 2 == 0 else None
        return index - index % 2

    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            if a.startswith("GPU") and b.startswith("GPU"):
                continue
            same_numa = int(a[3:]) // 4 == int(b[3:]) // 4
            together = switch(a) is not None and switch(a) == switch(b)
            kind = "PIX" if together else "NODE" if same_numa else "SYS"
            links.append({"a": a, "b": b, "type": kind})
    return {
        "collected_at": iso(at),
        "source": "nvml",
        "partial": False,
        "errors": [],
        "devices": devices,
        "links": links,
    }


def seed(db_url: str, base_url: str) -> None:
    """Ingest the node with its NVLinks (GPU 5 link 3 down) and topology."""
    gpus = [gpu(i, hostname=HOSTNAME) for i in range(8)]
    at = datetime.now(UTC) - timedelta(seconds=20)
    links = [link for g in gpus for link in nvlinks(g, at)]
    for link in links:
        if link["gpu_uuid"] == gpus[5]["uuid"] and link["link"] == 3:
            link.update(state="down", speed_gbps=None, tx_bytes_per_s=0.0, rx_bytes_per_s=0.0)
    payload = batch(
        HOSTNAME, gpus=gpus, samples_per_gpu=2, nvlinks=links, topology=hgx_topology(gpus, at)
    )
    post_batch(base_url, create_token(db_url, HOSTNAME), payload)


def take(out_dir: Path) -> Path:
    """Seed the node and shoot its topology page; returns the file written."""
    reason = chromium.missing_reason()
    if reason:
        raise SystemExit(reason)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "topology-page.png"
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'screenshot.db'}"
        upgrade(url)
        with live_server(load_settings(database_url=url, data_dir=Path(tmp))) as server:
            seed(url, server.url)
            with sync_playwright() as playwright:
                browser = chromium.launch(playwright)
                page = browser.new_page(
                    viewport={"width": 1700, "height": 900}, color_scheme="light"
                )
                page.goto(f"{server.url}/nodes/{HOSTNAME}/topology")
                page.wait_for_selector("svg.topo-graph")
                page.screenshot(path=path, full_page=True)
                browser.close()
    return path


if __name__ == "__main__":
    print(take(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")))
