"""Node sections (NVLinks, storage, NFS, NIC ports, MIG, processes, collection) go in through the
real ingest API and come back out of the read API exactly, on Postgres and SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.app.helpers import counts, post_batch, section_counts
from tests.app.section_factories import (
    NFS_READ_BYTES,
    disk,
    gpu_extras,
    nfs_mount,
    nic_port,
    nvlinks,
    with_sections,
)
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import LiveServer


def get(server: LiveServer, path: str) -> Any:
    response = httpx.get(f"{server.url}/api/v1/nodes/{path}")
    assert response.status_code == 200, response.text
    return response.json()


def test_every_section_is_stored_and_read_back_with_its_exact_values(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    at = datetime.now(UTC).replace(microsecond=123000) - timedelta(seconds=5)
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), at)

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["sections_stored"] == {
        "nvlinks": 36,
        "disks": 2,
        "mounts": 2,
        "nfs_mounts": 1,
        "nic_ports": 2,
    }
    assert body["sections_rejected"] == {}
    assert body["nulled_values"] == {}
    assert body["topology_changed"] is True

    node = get(server, "node-a")
    assert node["collector"] == "nvml"
    assert node["collection_errors"] == payload["collection"]["errors"]
    first, second = node["gpus"]
    assert first["unavailable"] == gpu_extras()["unavailable"]
    assert first["mig_instances"] == gpu_extras()["mig_instances"]
    assert first["processes"] == gpu_extras()["processes"]
    assert second["unavailable"] is second["mig_instances"] is second["processes"] is None

    storage = get(server, "node-a/storage")
    assert [d["device"] for d in storage["disks"]] == ["nvme0n1", "nvme1n1"]
    assert storage["disks"][0] == {**payload["disks"][0], "sampled_at": iso(at)}
    assert storage["disks"][1]["busy_pct"] == 2.0
    assert [m["mountpoint"] for m in storage["mounts"]] == ["/", "/data"]
    assert storage["mounts"][1] == {
        **payload["mounts"][1],
        "sampled_at": iso(at),
        "used_pct": 100 * 1_200_000_000_000 / 7_600_000_000_000,
    }
    assert storage["nfs_mounts"] == [{**payload["nfs_mounts"][0], "sampled_at": iso(at)}]

    nics = get(server, "node-a/nics")["nic_ports"]
    assert nics == [{**p, "sampled_at": iso(at)} for p in payload["nic_ports"]]

    links = get(server, "node-a/nvlinks")["nvlinks"]
    assert len(links) == 36
    assert [(x["gpu_index"], x["link"]) for x in links[16:20]] == [(0, 16), (0, 17), (1, 0), (1, 1)]
    sent = {k: v for k, v in payload["nvlinks"][0].items() if k != "sampled_at"}
    assert links[0] == {**sent, "gpu_index": 0, "sampled_at": iso(at)}


def test_64_bit_nfs_counters_are_stored_exactly(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    at = datetime.now(UTC) - timedelta(seconds=5)
    payload = batch(gpus=1, samples_per_gpu=1)
    payload["nfs_mounts"] = [
        nfs_mount(at, read_bytes=NFS_READ_BYTES, write_bytes=2**64 - 1, ops=2**63, retransmits=0)
    ]
    assert '"read_bytes": 18446744073709551000' in json.dumps(payload)  # not 1.8e19

    assert post_batch(server.url, token, payload).json()["sections_stored"]["nfs_mounts"] == 1

    nfs = get(server, "node-a/storage")["nfs_mounts"][0]
    assert nfs["read_bytes"] == 18446744073709551000
    assert nfs["write_bytes"] == 18446744073709551615
    assert nfs["ops"] == 9223372036854775808
    assert nfs["retransmits"] == 0
    text = httpx.get(f"{server.url}/api/v1/nodes/node-a/storage").text
    assert '"read_bytes":18446744073709551000' in text


def test_a_replayed_batch_stores_no_section_twice(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), datetime.now(UTC))
    first = post_batch(server.url, token, payload).json()
    before = (counts(db_url), section_counts(db_url))

    again = post_batch(server.url, token, payload).json()

    assert again["replayed"] is True
    assert again["sections_stored"] == first["sections_stored"]
    assert (counts(db_url), section_counts(db_url)) == before
    assert before[1]["nvlink_sample"] == 36
    assert before[1]["topology_change"] == 1


def test_entries_already_stored_are_skipped_when_sent_in_another_batch(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=1, samples_per_gpu=1), datetime.now(UTC))
    post_batch(server.url, token, payload)
    before = section_counts(db_url)
    resent = dict(payload, batch_id="another-batch")
    resent["disks"] = [*payload["disks"], payload["disks"][0]]  # and repeated within the batch

    body = post_batch(server.url, token, resent).json()

    assert body["sections_stored"] == {
        "nvlinks": 0,
        "disks": 0,
        "mounts": 0,
        "nfs_mounts": 0,
        "nic_ports": 0,
    }
    assert body["topology_changed"] is False
    assert section_counts(db_url) == before


def test_the_newest_reading_of_each_device_is_the_current_one(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    now = datetime.now(UTC)
    payload = batch(gpus=1, samples_per_gpu=1)
    payload["disks"] = [
        disk(now - timedelta(seconds=10), "nvme0n1", busy_pct=10.0),
        disk(now - timedelta(seconds=5), "nvme0n1", busy_pct=20.0),
        disk(now - timedelta(hours=1), "sdz"),  # gone: not reported for an hour
    ]
    payload["nic_ports"] = [
        nic_port(now - timedelta(seconds=10), "mlx5_10"),
        nic_port(now - timedelta(seconds=5), "mlx5_2", state="DOWN", phys_state="Polling"),
    ]
    post_batch(server.url, token, payload)

    disks = get(server, "node-a/storage")["disks"]
    assert [(d["device"], d["busy_pct"]) for d in disks] == [("nvme0n1", 20.0)]
    nics = get(server, "node-a/nics")["nic_ports"]
    assert [(p["device"], p["state"]) for p in nics] == [("mlx5_2", "DOWN"), ("mlx5_10", "ACTIVE")]


def test_section_entries_from_the_future_too_old_or_of_unknown_gpus_are_rejected(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    g = gpu(0)
    now = datetime.now(UTC)
    payload = batch(gpus=[g], samples_per_gpu=1)
    payload["disks"] = [
        disk(now + timedelta(hours=2)),
        disk(now - timedelta(days=400)),
        disk(now),
    ]
    payload["nvlinks"] = nvlinks(gpu(7, hostname="elsewhere"), now, links=2) + nvlinks(g, now)

    body = post_batch(server.url, token, payload).json()

    assert body["sections_stored"] == {"disks": 1, "nvlinks": 18}
    assert body["sections_rejected"] == {
        "disks.sampled_at_in_future": 1,
        "disks.older_than_retention": 1,
        "nvlinks.unknown_gpu": 2,
    }


def test_an_agent_without_sections_keeps_working_and_clears_nothing(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, with_sections(batch(gpus=1), datetime.now(UTC)))

    body = post_batch(server.url, token, batch(gpus=1)).json()

    assert body["samples_stored"] == 3
    assert body["sections_stored"] == {}
    assert body["topology_changed"] is None
    node = get(server, "node-a")
    assert node["collector"] == "nvml"  # as last reported by an agent that reports it
    assert get(server, "node-a/storage")["nfs_mounts"][0]["read_bytes"] == NFS_READ_BYTES
    assert get(server, "node-a/topology")["latest"] is not None


def test_section_reads_of_an_unknown_node_are_404(server: LiveServer) -> None:
    for path in ("storage", "nics", "nvlinks", "topology"):
        response = httpx.get(f"{server.url}/api/v1/nodes/nope/{path}")
        assert response.status_code == 404
        assert "nope" in response.json()["detail"]
