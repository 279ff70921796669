"""A GPU the agent could not open reaches the server as ``GPU-unknown-<PCI address>`` in state
``lost``/``unknown_error``; once the GPU is read again under its own UUID at that address, it
takes the placeholder's row (and history) instead of leaving it behind as a missing GPU."""

from __future__ import annotations

import httpx

from tests.app.helpers import post_batch
from tests.factories import batch, create_token, gpu
from tests.live_server import LiveServer

BUS = "00000000:28:00.0"  # gpu(1)'s address in the factories


def _unreadable() -> dict[str, object]:
    return {
        "uuid": f"GPU-unknown-{BUS}",
        "index": 1,
        "name": None,
        "pci_bus_id": BUS,
        "mem_total_bytes": None,
        "mig_mode": None,
        "state": "lost",
        "state_reason": "nvidia-smi: GPU is lost. Reboot the system to recover this GPU",
    }


def test_a_gpu_lost_before_the_agent_started_shows_lost_with_its_address(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    response = post_batch(server.url, token, batch(gpus=[gpu(0), _unreadable()]))
    assert response.status_code == 200, response.text
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert [(g["pci_bus_id"], g["state"]) for g in node["gpus"]] == [
        ("00000000:18:00.0", "ok"),
        (BUS, "lost"),
    ]
    assert node["gpus"][1]["state_reason"].startswith("nvidia-smi: GPU is lost")


def test_the_gpu_read_again_under_its_uuid_takes_the_placeholder_row(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, batch(gpus=[gpu(0), _unreadable()]))
    body = post_batch(server.url, token, batch(gpus=[gpu(0), gpu(1)])).json()
    assert body["gpus_missing"] == []
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert [(g["uuid"], g["state"]) for g in node["gpus"]] == [
        (gpu(0)["uuid"], "ok"),
        (gpu(1)["uuid"], "ok"),
    ]


def test_a_placeholder_whose_address_nobody_reports_is_missing_as_any_gpu(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, batch(gpus=[gpu(0), _unreadable()]))
    body = post_batch(server.url, token, batch(gpus=[gpu(0)])).json()
    assert body["gpus_missing"] == [f"GPU-unknown-{BUS}"]
