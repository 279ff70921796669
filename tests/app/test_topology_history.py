"""The server keeps each distinct topology of a node once and records when it changed; the
hourly re-send of an unchanged topology stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.app.helpers import post_batch, section_counts
from tests.app.section_factories import topology
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import LiveServer


def send(server: LiveServer, token: str, topo: dict[str, Any]) -> dict[str, Any]:
    payload = batch(gpus=[gpu(i) for i in range(4)], samples_per_gpu=1, topology=topo)
    response = post_batch(server.url, token, payload)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_only_changes_are_stored_and_a_topology_that_comes_back_is_a_change(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    gpus = [gpu(i) for i in range(4)]
    t0 = datetime.now(UTC) - timedelta(minutes=10)
    healthy = topology(gpus, t0)
    degraded = topology(gpus, t0, nvlinks_per_pair=17)

    assert send(server, token, healthy)["topology_changed"] is True
    hourly = dict(healthy, collected_at=iso(t0 + timedelta(minutes=1)))
    assert send(server, token, hourly)["topology_changed"] is False
    assert send(server, token, dict(degraded, collected_at=iso(t0 + timedelta(minutes=2))))[
        "topology_changed"
    ]
    assert send(server, token, dict(healthy, collected_at=iso(t0 + timedelta(minutes=3))))[
        "topology_changed"
    ]

    stored = section_counts(db_url)
    assert stored["topology_snapshot"] == 2  # healthy and degraded, each once
    assert stored["topology_change"] == 3  # healthy → degraded → healthy again

    found = httpx.get(f"{server.url}/api/v1/nodes/node-a/topology").json()
    changes = found["changes"]
    assert [c["collected_at"] for c in changes] == [
        iso(t0 + timedelta(minutes=3)),
        iso(t0 + timedelta(minutes=2)),
        iso(t0),
    ]
    assert changes[0]["digest"] == changes[2]["digest"] != changes[1]["digest"]
    assert all(c["document"] is None for c in changes)
    latest = found["latest"]
    assert latest["digest"] == changes[0]["digest"]
    assert latest["collected_at"] == iso(t0 + timedelta(minutes=3))
    assert latest["document"]["links"][0] == {"a": "GPU0", "b": "GPU1", "type": "NV18"}
    assert latest["first_received_at"] < latest["received_at"]

    history = httpx.get(
        f"{server.url}/api/v1/nodes/node-a/topology", params={"history": "1"}
    ).json()
    assert history["changes"][1]["document"]["links"][0]["type"] == "NV17"
    assert history["changes"][1]["document"]["collected_at"] == iso(t0 + timedelta(minutes=2))


def test_old_soc_codes_read_as_sys_and_a_partial_topology_is_kept_as_such(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    gpus = [gpu(i) for i in range(4)]
    topo = topology(gpus, datetime.now(UTC), partial=True, errors=["nvml: GPU3: TIMEOUT"])
    topo["links"][0]["type"] = "SOC"
    send(server, token, topo)

    latest = httpx.get(f"{server.url}/api/v1/nodes/node-a/topology").json()["latest"]

    assert latest["partial"] is True
    assert latest["source"] == "nvml"
    assert latest["document"]["errors"] == ["nvml: GPU3: TIMEOUT"]
    assert latest["document"]["links"][0]["type"] == "SYS"


def test_a_node_that_never_sent_a_topology_has_none(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, batch(gpus=1))

    found = httpx.get(f"{server.url}/api/v1/nodes/node-a/topology").json()

    assert found == {"hostname": "node-a", "latest": None, "changes": []}
