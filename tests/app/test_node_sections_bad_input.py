"""Node sections that make the batch unreadable get 422 naming the field and store nothing;
one bad value or entry in them is left out alone (tests/app/test_ingest_inventory_values.py),
and implausible numbers are stored as null and counted, never failing the batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.app.helpers import counts, post_batch, section_counts
from tests.app.section_factories import disk, nic_port, nvlinks, with_sections
from tests.factories import batch, create_token, gpu, sample
from tests.live_server import LiveServer


def _set(payload: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = payload
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "loc"),
    [
        (("disks",), {"device": "sda"}, ["body", "disks"]),
        (("collection",), ["nvml"], ["body", "collection"]),
        (("nfs_mounts",), "none", ["body", "nfs_mounts"]),
    ],
)
def test_a_malformed_section_gets_422_naming_the_field_and_stores_nothing(
    server: LiveServer, db_url: str, path: tuple[Any, ...], value: Any, loc: list[Any]
) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), datetime.now(UTC))
    _set(payload, path, value)

    response = post_batch(server.url, token, payload)

    assert response.status_code == 422, response.text
    assert loc in [e["loc"] for e in response.json()["detail"]]
    assert counts(db_url) == {"samples": 0, "events": 0, "batches": 0}
    assert set(section_counts(db_url).values()) == {0}


def test_a_topology_link_to_an_unknown_device_is_dropped_and_the_topology_partial(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), datetime.now(UTC))
    payload["topology"]["links"].append({"a": "GPU9", "b": "NIC0", "type": "PIX"})

    body = post_batch(server.url, token, payload).json()

    assert body["sections_rejected"] == {"topology.links.unknown_device": 1}
    latest = httpx.get(f"{server.url}/api/v1/nodes/node-a/topology").json()["latest"]
    assert latest["partial"] is True
    assert latest["document"]["errors"] == ["1 link(s) name no device of this topology: GPU9"]
    assert {"a": "GPU9", "b": "NIC0", "type": "PIX"} not in latest["document"]["links"]


def test_a_section_over_its_entry_limit_gets_422(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=1, samples_per_gpu=1)
    payload["collection"] = {
        "collector": "nvml",
        "errors": [{"source": "nvml", "message": "x"}] * 101,
    }

    response = post_batch(server.url, token, payload)

    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "collection", "errors"]


def test_implausible_section_values_are_stored_as_null_and_counted(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0, processes=[{"pid": 1, "used_memory_bytes": 2**64 - 1, "name": "x", "user": None}])
    now = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=[g], samples_per_gpu=0)
    payload["samples"] = [
        sample(g, now, pcie_link_gen=4294967295, remapped_rows_pending=0.5, pcie_link_width=16.0)
    ]
    payload["disks"] = [disk(now, busy_pct=250.0, avg_wait_s=-0.1, read_iops=float(2**64))]
    payload["nvlinks"] = nvlinks(g, now, links=1, crc_errors=2**64 - 1, speed_gbps=-1)
    payload["nic_ports"] = [nic_port(now, rate_gbps=1e9, symbol_error_count=65535.5)]

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["nulled_values"] == {
        "pcie_link_gen": 1,
        "remapped_rows_pending": 1,
        "processes.used_memory_bytes": 1,
        "disks.busy_pct": 1,
        "disks.avg_wait_s": 1,
        "disks.read_iops": 1,
        "nvlinks.crc_errors": 1,
        "nvlinks.speed_gbps": 1,
        "nic_ports.rate_gbps": 1,
        "nic_ports.symbol_error_count": 1,
    }
    assert body["sections_stored"] == {"nvlinks": 1, "disks": 1, "nic_ports": 1}
    stored_disk = httpx.get(f"{server.url}/api/v1/nodes/node-a/storage").json()["disks"][0]
    assert stored_disk["busy_pct"] is None and stored_disk["avg_wait_s"] is None
    assert stored_disk["write_iops"] == 80.5  # the entry's other values are kept
    link = httpx.get(f"{server.url}/api/v1/nodes/node-a/nvlinks").json()["nvlinks"][0]
    assert link["crc_errors"] is None and link["replay_errors"] == 0
    node = httpx.get(f"{server.url}/api/v1/nodes/node-a").json()
    assert node["gpus"][0]["latest"]["pcie_link_width"] == 16
    assert node["gpus"][0]["latest"]["pcie_link_gen"] is None
    assert node["gpus"][0]["processes"][0]["used_memory_bytes"] is None


def test_unknown_fields_in_sections_are_ignored(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=1, samples_per_gpu=1), datetime.now(UTC))
    payload["disks"][0]["discard_iops"] = 12.0
    payload["topology"]["devices"][0]["nvlink_bandwidth"] = "lots"
    payload["future_section"] = [{"anything": 1}]

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    document = httpx.get(f"{server.url}/api/v1/nodes/node-a/topology").json()["latest"]
    assert "nvlink_bandwidth" not in document["document"]["devices"][0]
