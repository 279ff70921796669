"""One inventory or node-section value the server cannot hold is left out alone, with its reason;
the rest of the batch is stored (issue 14). Once, a GPU's total memory of 2**64-1 (NVML's "not
available" as an unsigned 64-bit) refused the whole batch with 422: the node stayed "never
seen" and its healthy GPUs' samples were lost."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.app.helpers import counts, post_batch, section_counts
from tests.app.section_factories import with_sections
from tests.factories import batch, create_token, gpu
from tests.live_server import LiveServer

NVML_NOT_AVAILABLE_U64 = 2**64 - 1
H100_MEMORY = 85520809984


def _node(server: LiveServer, hostname: str = "node-a") -> dict[str, Any]:
    response = httpx.get(f"{server.url}/api/v1/nodes/{hostname}", timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_gpu_whose_total_memory_is_the_nvml_sentinel_is_stored_with_that_value_null(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=8, samples_per_gpu=3)
    payload["gpus"][3]["mem_total_bytes"] = NVML_NOT_AVAILABLE_U64

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["samples_stored"] == 24 and answer["samples_rejected"] == 0
    assert answer["nulled_values"] == {"gpus.mem_total_bytes": 1}
    assert counts(db_url)["samples"] == 24
    node = _node(server)
    assert node["freshness"] == "fresh"
    gpus = {g["index"]: g for g in node["gpus"]}
    assert sorted(gpus) == list(range(8))
    assert gpus[3]["mem_total_bytes"] is None
    assert gpus[3]["implausible_inventory"] == {"mem_total_bytes": str(NVML_NOT_AVAILABLE_U64)}
    for index in (0, 1, 2, 4, 5, 6, 7):
        assert gpus[index]["mem_total_bytes"] == H100_MEMORY
        assert gpus[index]["implausible_inventory"] is None
        assert gpus[index]["latest"]["util_gpu_pct"] == 50
    assert gpus[3]["latest"]["util_gpu_pct"] == 50

    page = httpx.get(f"{server.url}/nodes/node-a/gpus/{gpus[3]['uuid']}", timeout=30).text
    memory = page.split('data-field="mem_total_bytes">', 1)[1].split("</dd>", 1)[0]
    assert "na-implausible" in memory
    assert f"the agent sent {NVML_NOT_AVAILABLE_U64}" in memory

    again = post_batch(server.url, token, payload).json()
    assert again["replayed"] is True and again["nulled_values"] == answer["nulled_values"]


def test_the_reason_goes_when_the_agent_sends_a_plausible_value_again(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=2, samples_per_gpu=1)
    payload["gpus"][1]["mem_total_bytes"] = NVML_NOT_AVAILABLE_U64
    assert post_batch(server.url, token, payload).status_code == 200

    assert post_batch(server.url, token, batch(gpus=2, samples_per_gpu=1)).status_code == 200

    later = {g["index"]: g for g in _node(server)["gpus"]}[1]
    assert later["mem_total_bytes"] == H100_MEMORY
    assert later["implausible_inventory"] is None


#: (field, value sent, the value stored): one bad field per GPU of a 10-GPU node.
BAD_GPU_FIELDS: list[tuple[str, Any, Any]] = [
    ("index", 2**32 - 1, 0),  # the GPU's position in the list stands in
    ("name", 12345, None),
    ("pci_bus_id", "PCI:0000:3A:00.0 (domain 0, bus 58, device 0)", None),
    ("mem_total_bytes", -1, None),
    ("mig_mode", "Enabled", None),
    ("state", "degraded", "ok"),  # not a state the server knows: its default
    ("state_reason", 42, None),
    ("mem_total_bytes", 1.5, None),
    ("pci_bus_id", "0000:1A:00.0\u202e", None),
    ("name", "x" * 300, None),
]


def test_each_bad_gpu_field_is_left_out_alone_with_its_reason(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=10, samples_per_gpu=2)
    for entry, (name, value, _) in zip(payload["gpus"], BAD_GPU_FIELDS, strict=True):
        entry[name] = value
    payload["gpus"][1]["unavailable"] = {"Fan Speed": "NOT_SUPPORTED", "power_w": "NOT_SUPPORTED"}
    payload["gpus"][2]["mig_instances"] = [{"gpu_instance_id": 2**32 - 1, "profile": "1g.10gb"}]
    payload["gpus"][4]["processes"] = [
        {"pid": -1, "used_memory_bytes": 1, "name": "ghost", "user": None},
        {"pid": 777, "used_memory_bytes": 1048576, "name": ["python3"], "user": None},
    ]

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["samples_stored"] == 20
    assert answer["nulled_values"] == {
        "gpus.index": 1,
        "gpus.name": 2,
        "gpus.pci_bus_id": 2,
        "gpus.mem_total_bytes": 2,
        "gpus.mig_mode": 1,
        "gpus.state": 1,
        "gpus.state_reason": 1,
        "gpus.unavailable": 1,
        "mig_instances.gpu_instance_id": 1,
        "processes.name": 1,
    }
    assert answer["sections_rejected"] == {"processes.invalid": 1}
    by_uuid = {g["uuid"]: g for g in _node(server)["gpus"]}
    for entry, (name, value, stored) in zip(payload["gpus"], BAD_GPU_FIELDS, strict=True):
        got = by_uuid[entry["uuid"]]
        assert got[name] == stored, name
        sent = json.dumps(value, ensure_ascii=False)[:64]
        assert got["implausible_inventory"] == {name: sent}, name
    assert by_uuid[payload["gpus"][5]["uuid"]]["implausible_inventory"] == {"state": '"degraded"'}
    assert by_uuid[payload["gpus"][1]["uuid"]]["unavailable"] == {"power_w": "NOT_SUPPORTED"}
    mig = by_uuid[payload["gpus"][2]["uuid"]]["mig_instances"]
    assert mig[0]["gpu_instance_id"] is None and mig[0]["profile"] == "1g.10gb"
    processes = by_uuid[payload["gpus"][4]["uuid"]]["processes"]
    assert [(p["pid"], p["name"]) for p in processes] == [(777, None)]
    for entry, (name, _, _) in zip(payload["gpus"], BAD_GPU_FIELDS, strict=True):
        page = httpx.get(f"{server.url}/nodes/node-a/gpus/{entry['uuid']}", timeout=30).text
        where = "state" if name == "state_reason" else name  # shown beside the state
        shown = page.split(f'data-field="{where}">', 1)[1].split("</dd>", 1)[0]
        assert "na-implausible" in shown, name
    node_page = httpx.get(f"{server.url}/nodes/node-a", timeout=30)
    assert node_page.status_code == 200 and "na-implausible" in node_page.text


def test_a_gpu_without_a_usable_uuid_is_left_out_and_its_samples_rejected(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=3, samples_per_gpu=2)
    payload["gpus"][1]["uuid"] = None

    answer = post_batch(server.url, token, payload).json()

    assert answer["sections_rejected"] == {"gpus.invalid": 1}
    assert answer["samples_stored"] == 4
    assert answer["rejected_by_reason"] == {"unknown_gpu": 2}
    assert sorted(g["index"] for g in _node(server)["gpus"]) == [0, 2]


def test_a_gpu_listed_twice_is_stored_once_from_its_first_entry(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=[gpu(0), gpu(1), gpu(1, name="the second entry")], samples_per_gpu=1)

    answer = post_batch(server.url, token, payload).json()

    assert answer["sections_rejected"] == {"gpus.duplicate_uuid": 1}
    # The factory samples each entry: gpu(1)'s sample comes twice, the second a duplicate.
    assert (answer["samples_stored"], answer["samples_duplicate"]) == (2, 1)
    names = sorted(g["name"] for g in _node(server)["gpus"])
    assert names == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]


def test_bad_node_values_and_labels_are_left_out_alone(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(labels={"cluster": "test", "Rack": "r01", "team": "ml\u202eops"})
    payload["node"]["driver_version"] = "x" * 100
    payload["node"]["cuda_version"] = 12.8

    answer = post_batch(server.url, token, payload).json()

    assert answer["nulled_values"] == {
        "node.labels": 2,
        "node.driver_version": 1,
        "node.cuda_version": 1,
    }
    node = _node(server)
    assert node["labels"] == {"cluster": "test"}
    assert node["driver_version"] is None and node["cuda_version"] is None
    assert node["agent_version"] == "0.1.0"


def test_one_bad_value_or_entry_in_a_node_section_is_left_out_alone(
    server: LiveServer, db_url: str
) -> None:
    """The entries that a bad value leaves unidentifiable (a link number, a time, a device, a
    port) are left out; any other bad value is nulled."""
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), datetime.now(UTC))
    payload["nvlinks"][0]["state"] = "sideways"
    payload["nvlinks"][1]["link"] = "1"
    payload["nvlinks"][2]["crc_errors"] = "0"
    payload["nvlinks"][3]["remote_pci_bus_id"] = "x" * 40
    payload["disks"][0]["busy_pct"] = "35"
    payload["disks"][1]["sampled_at"] = "2026-11-29T12:00:00"
    payload["mounts"][0]["used_bytes"] = True
    payload["nfs_mounts"][0]["ops"] = {"hi": 1}
    payload["nic_ports"][0]["port"] = 1.0
    payload["nic_ports"][1]["state"] = 4
    payload["topology"]["links"][0]["type"] = "NV"
    payload["topology"]["devices"][0]["numa_node"] = "x"
    payload["collection"]["errors"].append("boom")
    payload["gpus"][0]["unavailable"]["fan_pct"] = 3

    response = post_batch(server.url, token, payload)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["nulled_values"] == {
        "nvlinks.state": 1,
        "nvlinks.crc_errors": 1,
        "nvlinks.remote_pci_bus_id": 1,
        "disks.busy_pct": 1,
        "mounts.used_bytes": 1,
        "nfs_mounts.ops": 1,
        "nic_ports.state": 1,
        "topology.devices.numa_node": 1,
        "gpus.unavailable": 1,
    }
    assert answer["sections_rejected"] == {
        "nvlinks.invalid": 1,
        "disks.invalid": 1,
        "nic_ports.invalid": 1,
        "topology.links.invalid": 1,
        "collection.errors.invalid": 1,
    }
    assert answer["samples_stored"] == 2
    assert answer["sections_stored"] == {
        "nvlinks": 35,
        "disks": 1,
        "mounts": 2,
        "nfs_mounts": 1,
        "nic_ports": 1,
    }
    links = httpx.get(f"{server.url}/api/v1/nodes/node-a/nvlinks", timeout=30).json()["nvlinks"]
    first = next(link for link in links if link["gpu_index"] == 0 and link["link"] == 0)
    assert first["state"] == "unknown" and first["speed_gbps"] == 26.562
    topology = httpx.get(f"{server.url}/api/v1/nodes/node-a/topology", timeout=30).json()
    assert topology["latest"]["document"]["devices"][0]["numa_node"] is None


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda p: p["topology"].update(partial="no"), id="partial-not-a-boolean"),
        pytest.param(
            lambda p: p["topology"]["devices"][1].update(id="GPU0"), id="two-devices-one-id"
        ),
    ],
)
def test_a_topology_with_a_bad_value_of_its_own_is_left_out_whole(
    server: LiveServer, db_url: str, spoil: Any
) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), datetime.now(UTC))
    spoil(payload)

    answer = post_batch(server.url, token, payload).json()

    assert answer["sections_rejected"] == {"topology.invalid": 1}
    assert answer["topology_changed"] is None
    assert answer["samples_stored"] == 2 and answer["sections_stored"]["nvlinks"] == 36
    assert section_counts(db_url)["topology_snapshot"] == 0


@pytest.mark.parametrize(
    ("path", "value", "loc"),
    [
        (("node", "hostname"), None, ["body", "node", "hostname"]),
        (("node", "labels"), ["rack"], ["body", "node", "labels"]),
        (("gpus",), {"uuid": "GPU-1"}, ["body", "gpus"]),
        (("samples",), {"temp_c": "hot"}, ["body", "samples"]),
        (("events",), {"kind": "xid"}, ["body", "events"]),
        (("nvlinks",), {"link": 1}, ["body", "nvlinks"]),
        (("topology",), "flat", ["body", "topology"]),
        (("collection", "errors"), [{"source": "a", "message": "b"}] * 101, None),
    ],
)
def test_what_makes_the_batch_unreadable_as_a_whole_still_gets_422(
    server: LiveServer, db_url: str, path: tuple[Any, ...], value: Any, loc: list[Any] | None
) -> None:
    token = create_token(db_url, "node-a")
    payload = with_sections(batch(gpus=2, samples_per_gpu=1), datetime.now(UTC))
    payload["gpus"][0]["mem_total_bytes"] = NVML_NOT_AVAILABLE_U64  # mendable, but not alone
    target: Any = payload
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value

    response = post_batch(server.url, token, payload)

    assert response.status_code == 422, response.text
    locs = [err["loc"] for err in response.json()["detail"]]
    assert loc is None or loc in locs
    assert counts(db_url) == {"samples": 0, "events": 0, "batches": 0}


def test_a_batch_id_reused_with_other_content_is_still_refused(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(gpus=2, samples_per_gpu=1, start=datetime.now(UTC) - timedelta(seconds=10))
    payload["gpus"][0]["mem_total_bytes"] = NVML_NOT_AVAILABLE_U64
    assert post_batch(server.url, token, payload).status_code == 200
    payload["gpus"][0]["mem_total_bytes"] = NVML_NOT_AVAILABLE_U64 - 1

    assert post_batch(server.url, token, payload).status_code == 409
