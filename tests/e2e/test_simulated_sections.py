"""A simulated HGX node and a PCIe node push their node sections to a real server: every section
is stored and readable, nothing is nulled or rejected, and the injected faults (nvlink_down,
ib_port_down, storage_slow) show in the read API and on the node page."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from agents.fleetspec import FleetNode, ScheduledFault
from agents.simfleet import SimFleet
from tests.conftest import make_settings
from tests.factories import create_token
from tests.live_server import live_server


def _get(base: str, path: str) -> Any:
    response = httpx.get(f"{base}/api/v1/nodes/{path}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def _wait(predicate: Any, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return bool(predicate())


def test_simulated_sections_and_faults_reach_the_read_api(db_url: str, tmp_path: Path) -> None:
    nodes = [
        FleetNode("hgx-001", create_token(db_url, "hgx-001"), 8, {"cluster": "e2e"}),
        FleetNode("pcie-001", create_token(db_url, "pcie-001"), 4, {"cluster": "e2e"}),
    ]
    faults = [
        ScheduledFault("hgx-001", "nvlink_down", 1.5, gpu_index=3),
        ScheduledFault("hgx-001", "ib_port_down", 0.5, gpu_index=6),
        ScheduledFault("pcie-001", "storage_slow", 0.5),
    ]
    with live_server(make_settings(db_url, tmp_path)) as server:
        base = server.url
        fleet = SimFleet(
            nodes, server_url=base, spool_root=tmp_path / "spool", interval_s=0.2,
            batch_interval_s=0.5, faults=faults,
        )  # fmt: skip
        with fleet:

            def faults_visible() -> bool:
                links = _get(base, "hgx-001/nvlinks")["nvlinks"]
                ports = _get(base, "hgx-001/nics")["nic_ports"]
                nfs = _get(base, "pcie-001/storage")["nfs_mounts"]
                return (
                    any(x["state"] == "down" for x in links)
                    and any(p["state"] == "DOWN" for p in ports)
                    and any((m["avg_rtt_s"] or 0) > 0.04 for m in nfs)
                    and "NV17" in str(_get(base, "hgx-001/topology")["latest"])
                )

            assert _wait(faults_visible)
        assert fleet.totals()["batches_dropped"] == 0

        links = _get(base, "hgx-001/nvlinks")["nvlinks"]
        assert len(links) == 8 * 18
        (down,) = [x for x in links if x["state"] == "down"]
        assert down["gpu_index"] == 3 and down["crc_errors"] > 0
        assert _get(base, "pcie-001/nvlinks")["nvlinks"] == []

        ports = _get(base, "hgx-001/nics")["nic_ports"]
        assert [p["device"] for p in ports] == [f"mlx5_{i}" for i in range(8)]
        assert ports[6]["phys_state"] == "Polling" and ports[0]["rate_gbps"] == 400.0
        assert len(_get(base, "pcie-001/nics")["nic_ports"]) == 4

        storage = _get(base, "pcie-001/storage")
        assert [m["mountpoint"] for m in storage["mounts"]] == ["/", "/data", "/scratch"]
        assert storage["nfs_mounts"][0]["read_bytes"] > 2**63  # exact through the database
        slow = next(d for d in storage["disks"] if d["device"] == "nvme1n1")
        assert slow["avg_wait_s"] > 0.04

        topology = _get(base, "hgx-001/topology?history=1")
        assert len(topology["changes"]) >= 2  # NV18 everywhere, then NV17 to GPU3
        oldest = topology["changes"][-1]["document"]
        gpu_pairs = [x for x in oldest["links"] if x["a"][:3] == x["b"][:3] == "GPU"]
        assert {x["type"] for x in gpu_pairs} == {"NV18"} and len(gpu_pairs) == 28

        node = _get(base, "hgx-001")
        assert node["collector"] == "simulated" and node["collection_errors"] == []
        assert node["gpus"][0]["unavailable"]["fan_pct"] == "NOT_SUPPORTED"
        assert node["gpus"][0]["latest"]["pcie_link_gen"] == 5

        page = httpx.get(f"{base}/nodes/hgx-001", timeout=10).text
        assert "17 / 18" in page and "Polling" in page and 'id="topology-heading"' in page
