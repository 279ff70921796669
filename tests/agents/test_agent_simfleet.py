"""The simulated fleet runs many agents in one process, injects scheduled faults, and stops
cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.fleetspec import FleetNode, ScheduledFault, load_fleet_file, parse_fault
from agents.simfleet import SimFleet
from agents.simulated.host import SimulatedHostSource
from tests.agents.agent_receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
Wait = Callable[..., bool]
NODES = [
    FleetNode("gpu-a-001", "fwt_a1", 8, {"cluster": "a", "rack": "r01"}),
    FleetNode("gpu-b-001", "fwt_b1", 4, {"cluster": "b"}),
    FleetNode("gpu-c-001", "fwt_c1", 2),
]


def _hosts(receiver: Receiver) -> set[str]:
    return {p["node"]["hostname"] for p in receiver.payloads()}


def test_fleet_runs_one_agent_per_node_and_each_pushes_with_its_own_token(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    with SimFleet(
        NODES, server_url=receiver.url, spool_root=tmp_path, interval_s=0.2, batch_interval_s=0.4
    ) as fleet:
        assert wait_until(lambda: all(a.batches_sent >= 1 for a in fleet.agents.values()))
        fleet.inject("gpu-b-001", "xid", gpu_index=0, xid=31)
        assert wait_until(lambda: any(p["events"] for p in receiver.payloads()))
    assert _hosts(receiver) == {"gpu-a-001", "gpu-b-001", "gpu-c-001"}
    tokens = {
        r.payload["node"]["hostname"]: r.headers["Authorization"]
        for r in receiver.requests
        if r.payload
    }
    assert tokens == {
        "gpu-a-001": "Bearer fwt_a1",
        "gpu-b-001": "Bearer fwt_b1",
        "gpu-c-001": "Bearer fwt_c1",
    }
    gpus = {p["node"]["hostname"]: len(p["gpus"]) for p in receiver.payloads()}
    assert gpus == {"gpu-a-001": 8, "gpu-b-001": 4, "gpu-c-001": 2}
    xids = [e for p in receiver.payloads() for e in p["events"] if e["kind"] == "xid"]
    assert [e["xid"] for e in xids] == [31]
    totals = fleet.totals()
    assert totals["samples_acked"] == totals["samples_generated"] > 0
    assert all(agent.batches_dropped == 0 for agent in fleet.agents.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-a-001", "gpu-b-001", "gpu-c-001"]


def test_scheduled_faults_reach_the_server_as_events(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    fault = ScheduledFault("gpu-a-001", "gpu_lost", at_s=0.0, gpu_index=5)

    def lost() -> bool:
        return any(e["kind"] == "gpu_lost" for p in receiver.payloads() for e in p["events"])

    with SimFleet(
        NODES[:1], server_url=receiver.url, spool_root=tmp_path, interval_s=0.2,
        batch_interval_s=0.4, faults=[fault],
    ):  # fmt: skip
        assert wait_until(lost)
    last = receiver.payloads()[-1]
    lost_gpu = last["gpus"][5]
    assert lost_gpu["state"] == "lost"
    latest = [s for s in last["samples"] if s["gpu_uuid"] == lost_gpu["uuid"]][-1]
    assert all(v is None for k, v in latest.items() if k not in ("gpu_uuid", "sampled_at"))


def test_a_fault_at_zero_seconds_is_in_force_before_the_first_report(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    fault = parse_fault("gpu-a-001:lost_at_start@0:5")

    with SimFleet(
        NODES[:1], server_url=receiver.url, spool_root=tmp_path, interval_s=0.2,
        batch_interval_s=0.4, faults=[fault],
    ):  # fmt: skip
        assert wait_until(lambda: bool(receiver.payloads()))
    first = receiver.payloads()[0]
    assert [g["index"] for g in first["gpus"]] == [0, 1, 2, 3, 4, 6, 7]
    assert first["node"]["expected_gpu_count"] == 8


def test_fault_specs_parse_host_kind_time_gpu_and_xid_code() -> None:
    assert parse_fault("gpu-a-001:xid48@30:3") == ScheduledFault("gpu-a-001", "xid", 30.0, 3, 48)
    assert parse_fault("n1:thermal_throttle@2.5") == ScheduledFault("n1", "thermal_throttle", 2.5)
    for bad in ("n1:gpu_lost", "n1:explode@3", "n1:gpu_lost48@3", "gpu_lost@3"):
        with pytest.raises(ValueError):
            parse_fault(bad)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu-c-001:gpu_lost@5:2", "fault gpu-c-001:gpu_lost: GPU index 2 out of range 0..1"),
        ("gpu-a-001:ib_flap@5:9", "fault gpu-a-001:ib_flap: port index 9 out of range 0..7"),
    ],
)
def test_a_fault_on_a_gpu_or_port_the_node_lacks_is_refused_at_start(
    tmp_path: Path, spec: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SimFleet(NODES, server_url="http://x", spool_root=tmp_path, faults=[parse_fault(spec)])


def test_a_fault_for_an_unknown_host_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown host"):
        SimFleet(
            NODES, server_url="http://x", spool_root=tmp_path,
            faults=[ScheduledFault("nope", "gpu_lost", 1.0)],
        )  # fmt: skip


def test_fleet_file_is_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "fleet.json"
    good.write_text(json.dumps({"nodes": [
        {"hostname": "gpu-a-001", "token": "fwt_1", "gpu_count": 8, "labels": {"rack": "r1"}},
        {"hostname": "gpu-a-002", "token": "fwt_2", "gpu_count": 4},
    ]}))  # fmt: skip
    assert load_fleet_file(good)[1] == FleetNode("gpu-a-002", "fwt_2", 4, {})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nodes": [{"hostname": "n1", "token": "t", "labels": {"R": "x"}}]}))
    with pytest.raises(ValueError, match=r"nodes\[0\].*label key"):
        load_fleet_file(bad)
    bad.write_text(json.dumps({"nodes": [{"hostname": "n1"}]}))
    with pytest.raises(ValueError, match="token missing"):
        load_fleet_file(bad)


def test_simfleet_command_pushes_and_exits_0_on_sigterm(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps({"nodes": [
        {"hostname": "gpu-a-001", "token": "fwt_1", "gpu_count": 8, "labels": {}},
        {"hostname": "gpu-b-001", "token": "fwt_2", "gpu_count": 4, "labels": {}},
    ]}))  # fmt: skip
    process = subprocess.Popen(
        [
            sys.executable, "-m", "agents.simfleet", "--server", receiver.url,
            "--fleet-file", str(fleet_file), "--interval", "0.2", "--batch-interval", "0.4",
            "--spool-dir", str(tmp_path / "spool"), "--fault", "gpu-b-001:xid94@0:1",
            "--random-faults",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: _hosts(receiver) == {"gpu-a-001", "gpu-b-001"})
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "simfleet stopped" in stderr
    xids = [e["xid"] for p in receiver.payloads() for e in p["events"] if e["kind"] == "xid"]
    assert 94 in xids


def test_each_node_reports_its_host_sections_and_host_faults_reach_them(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    faults = [
        ScheduledFault("gpu-a-001", "nvlink_down", at_s=0.0, gpu_index=1),
        ScheduledFault("gpu-a-001", "ib_port_down", at_s=0.0, gpu_index=2),
        ScheduledFault("gpu-b-001", "storage_slow", at_s=0.0),
    ]

    def sections(host: str, name: str) -> list[dict[str, Any]]:
        return [
            entry
            for p in receiver.payloads()
            if p["node"]["hostname"] == host
            for entry in p.get(name, [])
        ]

    def faults_seen() -> bool:
        return (
            any(x["state"] == "down" for x in sections("gpu-a-001", "nvlinks"))
            and any(x["state"] == "DOWN" for x in sections("gpu-a-001", "nic_ports"))
            and any((x["avg_rtt_s"] or 0) > 0.04 for x in sections("gpu-b-001", "nfs_mounts"))
        )

    with SimFleet(
        NODES[:2], server_url=receiver.url, spool_root=tmp_path, interval_s=0.2,
        batch_interval_s=0.4, faults=faults,
        agent_options={"host_interval_s": 0.0},  # every round: the test checks every payload
    ) as fleet:  # fmt: skip
        assert isinstance(fleet.host_sources["gpu-a-001"], SimulatedHostSource)
        assert wait_until(faults_seen)
    down = next(x for x in sections("gpu-a-001", "nic_ports") if x["state"] == "DOWN")
    assert down["device"] == "mlx5_2" and down["phys_state"] == "Polling"
    gpu1 = next(p for p in receiver.payloads() if p["node"]["hostname"] == "gpu-a-001")
    down_links = [x for x in sections("gpu-a-001", "nvlinks") if x["state"] == "down"]
    assert {x["gpu_uuid"] for x in down_links} == {gpu1["gpus"][1]["uuid"]}
    assert sections("gpu-b-001", "nvlinks") == []  # the PCIe node has none
    topologies = [p["topology"] for p in receiver.payloads() if "topology" in p]
    assert {t["source"] for t in topologies} == {"simulated"}
    for payload in receiver.payloads():
        assert {"disks", "mounts", "nfs_mounts", "nic_ports", "collection"} <= set(payload)


def test_new_fault_kinds_parse_and_a_node_without_nvlink_refuses_nvlink_down(
    tmp_path: Path,
) -> None:
    assert parse_fault("n1:ib_port_down@5:3") == ScheduledFault("n1", "ib_port_down", 5.0, 3)
    assert parse_fault("n1:storage_slow@1") == ScheduledFault("n1", "storage_slow", 1.0)
    assert parse_fault("n1:nvlink_down@2:7") == ScheduledFault("n1", "nvlink_down", 2.0, 7)
    fleet = SimFleet(NODES[1:2], server_url="http://x", spool_root=tmp_path)
    with pytest.raises(ValueError, match="no NVLink"):
        fleet.inject("gpu-b-001", "nvlink_down")
    fleet.inject("gpu-b-001", "ib_port_down", gpu_index=0, duration_s=5)  # goes to the host
