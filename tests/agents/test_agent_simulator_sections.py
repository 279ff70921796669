"""The simulator's node sections look like the captured machines: NVLinks, topology, storage,
NFS and InfiniBand ports, with the faults that change them (nvlink_down, ib_port_down,
storage_slow)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.simulated.collector import SimulatedCollector
from agents.simulated.host import SimulatedHostSource
from tests.shared_fixtures import fixture_path

START = datetime(2026, 11, 29, 14, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=5)


def _round(
    collector: SimulatedCollector, host: SimulatedHostSource | None, at: datetime
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    collector.sample(at)
    return collector.nvlinks(at), host.collect(at) if host is not None else {}


def _topo_rows(text: str) -> dict[str, list[str]]:
    """``topo -m`` rows by device, each cell as printed (affinity columns last)."""
    return {
        line.split()[0]: line.split()[1:]
        for line in text.splitlines()
        if line.split() and line.split()[0].startswith(("GPU", "NIC"))
    }


def _matrix(topology: dict[str, Any]) -> dict[str, list[str]]:
    """The simulated topology as ``topo -m`` GPU rows: codes, then CPU and NUMA affinity."""
    gpus = [d for d in topology["devices"] if d["kind"] == "gpu"]
    pairs = {(link["a"], link["b"]): link["type"] for link in topology["links"]}
    pairs |= {(b, a): kind for (a, b), kind in pairs.items()}
    return {
        d["id"]: [
            "X" if o["id"] == d["id"] else pairs[(d["id"], o["id"])] for o in gpus
        ] + [d["cpu_affinity"], str(d["numa_node"])]
        for d in gpus
    }  # fmt: skip


def test_an_hgx_gpu_has_18_nvlinks_to_the_nvswitches_at_26_562_gbs() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    links, _ = _round(collector, None, START)
    links, _ = _round(collector, None, START + STEP)

    assert len(links) == 8 * 18
    first = [link for link in links if link["gpu_uuid"] == collector.gpus[0].uuid]
    assert [link["link"] for link in first] == list(range(18))
    assert {link["state"] for link in links} == {"up"}
    assert {link["speed_gbps"] for link in links} == {26.562}
    assert {link["remote_device_type"] for link in links} == {"nvswitch"}
    assert {link["remote_pci_bus_id"][9:11] for link in links} == {"C7", "C8", "C9", "CA"}
    busy = max(collector.gpus, key=lambda g: g.nvlink_tx)
    sent = sum(link["tx_bytes_per_s"] for link in links if link["gpu_uuid"] == busy.uuid)
    assert sent == pytest.approx(busy.nvlink_tx, rel=1e-6)


def test_a_pcie_l40s_node_has_no_nvlink() -> None:
    collector = SimulatedCollector("gpu-b-001", 4)
    assert _round(collector, None, START)[0] == []


def test_the_hgx_topology_is_the_captured_nv18_matrix() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    collector.sample(START)
    captured = _topo_rows(fixture_path("topo/h100-8gpu-nv18-condensed.txt").read_text())

    topology = collector.topology(START)

    assert topology is not None and topology["partial"] is False
    assert _matrix(topology) == captured


def test_the_l40s_topology_is_pcie_only_with_the_captured_numa_layout() -> None:
    collector = SimulatedCollector("gpu-b-001", 4)
    host = SimulatedHostSource(collector)
    collector.sample(START)
    captured = _topo_rows(
        fixture_path("topo/asus-esc8000a-e12-4gpu-4nic-2numa-amd.txt").read_text()
    )

    topology = collector.topology(START)
    nics, nic_links = host.topology_devices()

    assert topology is not None
    gpu_block = {k: v[:4] + v[8:10] for k, v in captured.items() if k.startswith("GPU")}
    assert _matrix(topology) == gpu_block
    assert [n["name"] for n in nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    kinds = {(link["a"], link["b"]): link["type"] for link in nic_links}
    assert kinds[("GPU0", "NIC0")] == "PIX"
    assert kinds[("GPU1", "NIC0")] == "NODE"
    assert kinds[("GPU3", "NIC0")] == "SYS"
    assert kinds[("NIC0", "NIC1")] == "NODE" and kinds[("NIC0", "NIC3")] == "SYS"


def test_nvlink_down_takes_one_link_down_its_errors_climb_and_topo_shows_nv17() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    _round(collector, None, START)
    collector.inject("nvlink_down", gpu_index=2, duration_s=60)
    readings = [_round(collector, None, START + STEP * i)[0] for i in range(1, 4)]

    down = [link for link in readings[-1] if link["state"] == "down"]
    assert len(down) == 1 and down[0]["gpu_uuid"] == collector.gpus[2].uuid
    assert down[0]["speed_gbps"] is None and down[0]["tx_bytes_per_s"] == 0.0
    crc = [next(x for x in r if x["state"] == "down")["crc_errors"] for r in readings]
    assert crc[0] < crc[1] < crc[2]
    (event,) = collector.drain_events()
    assert event["xid"] == 74 and f"link {down[0]['link']}(" in (event["message"] or "")
    topology = collector.topology(START + STEP * 3)
    assert topology is not None
    weak = {(x["a"], x["b"]) for x in topology["links"] if x["type"] == "NV17"}
    assert weak == {tuple(sorted(("GPU2", f"GPU{i}"))) for i in range(8) if i != 2}
    assert {x["type"] for x in topology["links"]} == {"NV17", "NV18"}

    back = _round(collector, None, START + STEP * 20)[0]
    assert {link["state"] for link in back} == {"up"}
    after = collector.topology(START + STEP * 20)
    assert after is not None and {x["type"] for x in after["links"]} == {"NV18"}


def test_nvlink_down_is_refused_on_a_node_without_nvlink() -> None:
    with pytest.raises(ValueError, match="no NVLink"):
        SimulatedCollector("gpu-b-001", 4).inject("nvlink_down")


def test_a_lost_gpu_leaves_the_topology_partial() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    collector.inject("gpu_lost", gpu_index=5)
    collector.sample(START)

    topology = collector.topology(START)
    _, nic_links = host.topology_devices()

    assert topology is not None and topology["partial"] is True
    assert "GPU5" in topology["errors"][0]
    assert "GPU5" not in {d["id"] for d in topology["devices"]}
    assert all("GPU5" not in (x["a"], x["b"]) for x in topology["links"] + nic_links)


def test_the_host_reports_nvme_disks_mounts_an_nfs_home_and_ndr_ports() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    _, first = _round(collector, host, START)
    _, second = _round(collector, host, START + STEP)

    assert [d["device"] for d in second["disks"]] == ["nvme0n1", "nvme1n1", "nvme2n1"]
    assert [m["mountpoint"] for m in second["mounts"]] == ["/", "/data", "/scratch"]
    assert all(0 < m["used_bytes"] < m["total_bytes"] for m in second["mounts"])
    (nfs,) = second["nfs_mounts"]
    assert nfs["mountpoint"] == "/home" and nfs["version"] == "4.2"
    assert 2**63 < nfs["read_bytes"] < 2**64 and isinstance(nfs["read_bytes"], int)
    assert nfs["read_bytes"] >= first["nfs_mounts"][0]["read_bytes"]
    assert first["disks"][0]["read_bytes_per_s"] is None  # no interval yet on the first reading
    assert first["nfs_mounts"][0]["avg_rtt_s"] is None
    assert all(d["read_bytes_per_s"] is not None for d in second["disks"])
    ports = second["nic_ports"]
    assert [p["device"] for p in ports] == [f"mlx5_{i}" for i in range(8)]
    assert {(p["state"], p["phys_state"], p["rate_gbps"]) for p in ports} == {
        ("ACTIVE", "LinkUp", 400.0)
    }
    assert {p["link_layer"] for p in ports} == {"InfiniBand"}
    assert len(SimulatedHostSource(SimulatedCollector("b", 4)).collect(START)["nic_ports"]) == 4


def test_port_traffic_and_data_reads_follow_gpu_load() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    traffic: dict[str, list[tuple[float, float]]] = {"busy": [], "idle": []}
    for i in range(60):
        _, sections = _round(collector, host, START + STEP * i)
        if i == 0:
            continue
        loads = collector.gpu_loads()
        for port in sections["nic_ports"]:
            load = loads[int(port["device"].split("_")[1])] or 0.0
            traffic["busy" if load > 0.5 else "idle"].append((load, port["tx_bytes_per_s"]))
    assert traffic["busy"] and traffic["idle"]
    assert min(tx for _, tx in traffic["busy"]) > max(tx for _, tx in traffic["idle"])


def test_ib_port_down_takes_the_port_down_polling_without_traffic_until_it_recovers() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    _round(collector, host, START)
    host.inject("ib_port_down", index=3, duration_s=60)

    port = _round(collector, host, START + STEP)[1]["nic_ports"][3]

    assert (port["state"], port["phys_state"]) == ("DOWN", "Polling")
    assert port["tx_bytes_per_s"] == port["rx_bytes_per_s"] == 0.0
    assert port["link_downed_count"] == 1
    back = _round(collector, host, START + STEP * 20)[1]["nic_ports"][3]
    assert (back["state"], back["phys_state"]) == ("ACTIVE", "LinkUp")
    assert back["link_downed_count"] == 1 and back["link_error_recovery_count"] == 1


def test_ib_flap_takes_the_port_down_and_up_counting_each_down_until_it_ends() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    _round(collector, host, START)
    host.inject("ib_flap", index=2, duration_s=30)
    second = timedelta(seconds=1)

    states = [_round(collector, host, START + second * k)[1]["nic_ports"][2] for k in range(1, 41)]

    # Down for 2 s of every 10 s from the first round after the injection, for 30 s.
    assert [p["state"] for p in states[:12]] == ["DOWN"] * 2 + ["ACTIVE"] * 8 + ["DOWN"] * 2
    assert [p["link_downed_count"] for p in states] == [1] * 10 + [2] * 10 + [3] * 20
    assert all(p["state"] == "ACTIVE" for p in states[30:])
    assert states[-1]["link_error_recovery_count"] == 3


def test_storage_slow_makes_data_reads_wait_and_nfs_round_trips_slow() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    _round(collector, host, START)
    _, normal = _round(collector, host, START + STEP)
    host.inject("storage_slow", duration_s=30)

    _, slow = _round(collector, host, START + STEP * 2)

    data = {d["device"]: d for d in slow["disks"]}
    assert normal["disks"][1]["avg_wait_s"] < 0.001 < 0.04 <= data["nvme1n1"]["avg_wait_s"]
    assert data["nvme1n1"]["busy_pct"] >= 97 and data["nvme0n1"]["avg_wait_s"] < 0.001
    assert normal["nfs_mounts"][0]["avg_rtt_s"] < 0.002 < 0.05 <= slow["nfs_mounts"][0]["avg_rtt_s"]
    assert slow["nfs_mounts"][0]["retransmits_per_s"] > 0
    _, later = _round(collector, host, START + STEP * 12)
    assert later["disks"][1]["avg_wait_s"] < 0.001


def test_host_faults_go_to_the_host_source_and_gpu_faults_to_the_collector() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    host = SimulatedHostSource(collector)
    with pytest.raises(ValueError, match="host fault"):
        collector.inject("ib_port_down")
    with pytest.raises(ValueError, match="unknown host fault"):
        host.inject("nvlink_down")
    with pytest.raises(ValueError, match="out of range"):
        host.inject("ib_port_down", index=8)


def test_gpus_report_their_processes_and_why_metrics_are_null() -> None:
    collector = SimulatedCollector("gpu-b-001", 4)
    for i in range(3):
        collector.sample(START + STEP * i)

    gpus: list[dict[str, Any]] = [dict(g) for g in collector.inventory()]

    busy = [g for g in gpus if collector.workload.job_on(g["index"])]
    assert busy and all(len(g["processes"]) == 1 for g in busy)
    process = busy[0]["processes"][0]
    assert process["name"] and process["user"] and process["used_memory_bytes"] > 0
    assert gpus[0]["unavailable"]["fan_pct"] == "NOT_SUPPORTED"
    assert gpus[0]["unavailable"]["mem_temp_c"] == "NOT_SUPPORTED"  # L40S: no memory sensor
    assert gpus[0]["mig_instances"] is None
    sample = collector.sample(START + STEP * 3)[0]
    assert (sample["pcie_link_gen"], sample["pcie_link_width"]) == (4, 16)
    assert sample["retired_pages_sbe_count"] is None
    assert sample["remapped_rows_uncorrectable_count"] == 0


def test_an_uncorrectable_ecc_error_leaves_a_row_remap_pending_until_the_reset() -> None:
    collector = SimulatedCollector("gpu-a-001", 8)
    collector.sample(START)
    collector.inject("xid", gpu_index=1, xid=48)
    hit = collector.sample(START + STEP)[1]

    assert hit["remapped_rows_uncorrectable_count"] == 1 and hit["remapped_rows_pending"] == 1
    collector.gpus[1].reset()
    assert collector.sample(START + STEP * 2)[1]["remapped_rows_pending"] == 0


def test_the_same_seed_gives_the_same_sections() -> None:
    runs = []
    for _ in range(2):
        collector = SimulatedCollector("n1", 8, seed=3)
        host = SimulatedHostSource(collector, seed=4)
        runs.append([_round(collector, host, START + STEP * i) for i in range(5)])
    assert runs[0] == runs[1]
