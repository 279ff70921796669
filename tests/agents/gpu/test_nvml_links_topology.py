"""NVLinks and topology from NVML, on fake machines laid out like real ``nvidia-smi topo -m`` and
``nvidia-smi nvlink -s`` captures: the collector must give the codes nvidia-smi printed."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.collectors.nvml import NvmlCollector
from tests.agents.gpu.fake_devices import FakeLink
from tests.agents.gpu.fake_pynvml import FakeNvml
from tests.shared_fixtures import fixture_path

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
H100 = "h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml"
PCIE_LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50, "SOC": 50}
Install = Callable[[str], FakeNvml]


def _expand(ranges: str) -> list[int]:
    cpus: list[int] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def _seed_from_matrix(fake: FakeNvml, name: str) -> dict[tuple[int, int], str]:
    """Lay out ``fake`` like the ``topo -m`` capture ``name`` (PCIe levels, CPU affinity, NUMA);
    return the GPU pair codes it printed."""
    lines = fixture_path(f"topo/{name}").read_text().splitlines()
    header = next(
        line.split() for line in lines if line.split()[:1] == ["GPU0"] and "X" not in line
    )
    columns = header.index("CPU")
    rows = [line.split() for line in lines if re.match(r"^GPU\d+\s", line)]
    codes = {}
    for i, row in enumerate(rows):
        device = fake.devices[i]
        device.cpus = _expand(row[1 + columns])
        numa = row[2 + columns] if len(row) > 2 + columns else "N/A"
        device.numa_node = int(numa) if numa.isdigit() else None
        for j in range(i + 1, len(rows)):
            codes[(i, j)] = "SYS" if row[1 + j] == "SOC" else row[1 + j]
            level = PCIE_LEVELS.get(row[1 + j], 40)
            fake.topology[(device.uuid, fake.devices[j].uuid)] = level
    return codes


def _links_from_status(name: str) -> list[FakeLink]:
    """GPU 0's links as ``nvidia-smi nvlink -s`` printed them (``Link 3: 26.562 GB/s``)."""
    text = fixture_path(f"nvlink/{name}").read_text()
    speeds = re.findall(r"Link \d+: ([\d.]+) GB/s", text.split("GPU 1:")[0])
    return [FakeLink(speed_mbps=round(float(s) * 1000)) for s in speeds]


def _pairs(topology: dict[str, object]) -> dict[tuple[int, int], str]:
    links = topology["links"]
    assert isinstance(links, list)
    return {(int(lk["a"][3:]), int(lk["b"][3:])): lk["type"] for lk in links}


def test_an_nvswitch_h100_node_is_nv18_between_every_pair_as_topo_m_shows(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml(H100)
    printed = _seed_from_matrix(fake, "gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt")
    for device in fake.devices:
        device.nvlinks = _links_from_status("h100-sxm-18-links-status.txt")
    topology = NvmlCollector().topology(NOW)
    assert topology is not None and topology["partial"] is False
    assert _pairs(topology) == printed
    assert set(printed.values()) == {"NV18"}
    devices = topology["devices"]
    assert [d["cpu_affinity"] for d in devices] == ["0-51,104-155"] * 4 + ["52-103,156-207"] * 4
    assert [d["numa_node"] for d in devices] == [0] * 4 + [1] * 4
    assert devices[0]["pci_bus_id"] == "00000000:04:00.0"
    assert (devices[0]["pcie_gen_max"], devices[0]["pcie_width_max"]) == (4, 16)  # in a VM


def test_gpus_behind_pcie_switches_are_pix_and_pxb_as_topo_m_shows(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml("tesla-v100s-pcie-32gb-8gpu-vm-under-load-driver460.xml")
    printed = _seed_from_matrix(fake, "p40-8gpu-pcie-switch-pix-pxb-soc-old-format.txt")
    topology = NvmlCollector().topology(NOW)
    assert topology is not None
    assert _pairs(topology) == printed
    assert {d["cpu_affinity"] for d in topology["devices"]} == {"0-13"}


def test_two_gpus_on_an_nvlink_bridge_are_nv2(capture_nvml: Install) -> None:
    fake = capture_nvml("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml")
    printed = _seed_from_matrix(fake, "dual-gpu-nv2-no-legend.txt")
    a, b = fake.devices
    a.nvlinks = [FakeLink(remote_type=0, remote_bus_id=b.bus_id or "") for _ in range(2)]
    b.nvlinks = [FakeLink(remote_type=0, remote_bus_id=a.bus_id or "") for _ in range(2)]
    topology = NvmlCollector().topology(NOW)
    assert topology is not None
    assert _pairs(topology) == printed == {(0, 1): "NV2"}
    assert [d["numa_node"] for d in topology["devices"]] == [None, None]  # N/A, no sysfs


def test_two_gpus_without_nvlink_are_phb(capture_nvml: Install) -> None:
    fake = capture_nvml("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml")
    printed = _seed_from_matrix(fake, "dual-gpu-phb-no-nvlink.txt")
    topology = NvmlCollector().topology(NOW)
    assert topology is not None
    assert _pairs(topology) == printed == {(0, 1): "PHB"}


def test_the_numa_node_comes_from_sysfs_when_nvml_lacks_the_call(
    capture_nvml: Install, tmp_path: pytest.TempPathFactory
) -> None:
    capture_nvml("tesla-t4-driver515.xml")
    device_dir = tmp_path / "bus/pci/devices/0000:00:1e.0"  # type: ignore[operator]
    device_dir.mkdir(parents=True)
    (device_dir / "numa_node").write_text("1\n")
    topology = NvmlCollector(sys_root=str(tmp_path)).topology(NOW)
    assert topology is not None
    assert topology["devices"][0]["numa_node"] == 1


def test_a_lost_gpu_makes_the_topology_partial_and_the_rest_is_still_sent(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml(H100)
    _seed_from_matrix(fake, "gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt")
    collector = NvmlCollector()
    fake.devices[6].lost = True
    topology = collector.topology(NOW)
    assert topology is not None and topology["partial"] is True
    assert len(topology["devices"]) == 7
    assert "NVML_ERROR_GPU_IS_LOST" in topology["errors"][0]
    assert all(6 not in pair for pair in _pairs(topology))


def test_a_gpu_lost_before_the_agent_started_makes_the_topology_partial(
    capture_nvml: Install, tmp_path: Path
) -> None:
    fake = capture_nvml(H100)
    _seed_from_matrix(fake, "gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt")
    fake.devices[6].lost = True
    topology = NvmlCollector(sys_root=str(tmp_path)).topology(NOW)  # no PCI list to name it
    assert topology is not None and topology["partial"] is True
    assert topology["errors"] == [
        "GPU 6 (GPU-unknown-index-6, PCI address unknown): NVML_ERROR_GPU_IS_LOST "
        "(nvmlDeviceGetUUID)"
    ]


def test_nvlinks_report_each_link_with_peer_speed_counters_and_rates(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml(H100)
    for device in fake.devices:
        device.nvlinks = _links_from_status("h100-sxm-18-links-status.txt")
    collector = NvmlCollector()
    first = collector.nvlinks(NOW)
    assert len(first) == 8 * 18
    entry = first[0]
    assert entry["gpu_uuid"] == fake.devices[0].uuid
    assert (entry["link"], entry["state"], entry["speed_gbps"]) == (0, "up", 26.562)
    assert (entry["remote_device_type"], entry["remote_pci_bus_id"]) == (
        "nvswitch",
        "00000000:C7:00.0",
    )
    assert (entry["crc_errors"], entry["replay_errors"], entry["recovery_errors"]) == (0, 0, 0)
    assert entry["tx_bytes_per_s"] is None  # first reading of a cumulative counter
    fake.devices[0].nvlinks[0].tx_kib = 4096  # type: ignore[index]
    fake.devices[0].nvlinks[0].errors[2] = 3  # type: ignore[index]
    second = collector.nvlinks(NOW + timedelta(seconds=5))[0]
    assert second["tx_bytes_per_s"] > 0 and second["rx_bytes_per_s"] == 0
    assert second["crc_errors"] == 3
    fake.devices[0].nvlinks[0].tx_kib = 0  # type: ignore[index]
    assert collector.nvlinks(NOW + timedelta(seconds=10))[0]["tx_bytes_per_s"] is None


def test_inactive_links_are_down_and_give_no_nv_code(capture_nvml: Install) -> None:
    # nvidia-smi on this card: "Unable to retrieve Nvlink information as all links are inActive"
    assert "inActive" in fixture_path("nvlink/rtx-2080-super-links-inactive.txt").read_text()
    fake = capture_nvml("geforce-rtx-2080ti-x2-ecc-unsupported-driver410.xml")
    _seed_from_matrix(fake, "dual-gpu-phb-no-nvlink.txt")
    for device in fake.devices:
        device.nvlinks = [FakeLink(up=False, remote_type=0), FakeLink(up=False, remote_type=0)]
    collector = NvmlCollector()
    assert {e["state"] for e in collector.nvlinks(NOW)} == {"down"}
    topology = collector.topology(NOW)
    assert topology is not None and _pairs(topology) == {(0, 1): "PHB"}


def test_a_gpu_without_nvlink_has_no_nvlink_entries(capture_nvml: Install) -> None:
    # nvidia-smi: "Device does not have or support Nvlink" (NVML: NOT_SUPPORTED on link 0)
    assert "not have or support" in fixture_path("nvlink/rtx-4080-super-no-nvlink.txt").read_text()
    fake = capture_nvml("rtx-4090-driver535.xml")
    collector = NvmlCollector()
    assert collector.nvlinks(NOW) == []
    collector.nvlinks(NOW)
    assert fake.calls.count("nvmlDeviceGetNvLinkState") == 1  # found once, remembered
