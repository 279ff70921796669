"""NICs and their PCI distance to GPUs come from sysfs, laid out as on a real node."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.topology.nics import InfinibandTopology
from tests.agents.topology.fake_sysfs import attach_hca, place_device, tree_from_listing
from tests.shared_fixtures import fixture_path

LISTING = "proc/sys-class-infiniband-h100-9hca-grep-listing.txt"

# Where each HCA of the listing sits: two sockets; on socket 0 a PCIe switch under host bridge
# pci0000:15 holds GPU0 and mlx5_0, a nested switch below it holds mlx5_1, mlx5_5 hangs off a
# root port of the same host bridge, mlx5_4 and the RoCE bond sit under another host bridge.
PLACES = {
    "mlx5_0": ("pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0", 0),
    "mlx5_1": (
        "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:02.0/0000:1a:00.0/0000:1b:00.0/0000:1c:00.0",
        0,
    ),
    "mlx5_4": ("pci0000:00/0000:00:02.0/0000:02:00.0", 0),
    "mlx5_5": ("pci0000:15/0000:15:03.0/0000:1d:00.0", 0),
    "mlx5_6": ("pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:01.0/0000:9b:00.0", 1),
    "mlx5_7": ("pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:01.0/0000:9b:00.1", 1),
    "mlx5_8": ("pci0000:a0/0000:a0:01.0/0000:a1:00.0/0000:a2:00.0/0000:a3:00.0", 1),
    "mlx5_9": ("pci0000:a0/0000:a0:01.0/0000:a1:00.0/0000:a2:01.0/0000:a4:00.0", 1),
    "mlx5_bond_0": ("pci0000:00/0000:00:03.0/0000:03:00.0", 0),
}
GPU0 = "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
GPU1 = "pci0000:97/0000:97:01.0/0000:98:00.0/0000:99:00.0/0000:9a:00.0"


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The listing's nine HCAs placed on a two-socket node with GPU0 and GPU1 (built once: the
    tests only read it)."""
    sysfs = tmp_path_factory.mktemp("sys")
    names = tree_from_listing(fixture_path(LISTING).read_text(encoding="utf-8"), sysfs)
    for name, (path, numa) in PLACES.items():
        attach_hca(sysfs, name, path, numa_node=numa)
    place_device(sysfs, GPU0, numa_node=0)
    place_device(sysfs, GPU1, numa_node=1)
    return sysfs, names


def test_the_listing_becomes_a_tree_with_nine_hcas_and_their_port_files(
    h100: tuple[Path, list[str]],
) -> None:
    sysfs, names = h100
    assert names == [f"mlx5_{i}" for i in (0, 1, 4, 5, 6, 7, 8, 9)] + ["mlx5_bond_0"]
    port = sysfs / "class/infiniband/mlx5_1/ports/1"
    assert (port / "counters/link_downed").read_text() == "255\n"
    assert (port / "state").read_text() == "4: ACTIVE\n"


def test_it_lists_each_hca_as_a_nic_with_bus_id_numa_node_and_link_layer(
    h100: tuple[Path, list[str]],
) -> None:
    sysfs = h100[0]
    source = InfinibandTopology(sysfs, ["00000000:18:00.0", "00000000:9A:00.0"])
    result = source.topology_devices()
    assert result is not None
    devices, _ = result
    assert [(d["id"], d["name"], d["pci_bus_id"], d["numa_node"]) for d in devices] == [
        ("NIC0", "mlx5_0", "0000:19:00.0", 0),
        ("NIC1", "mlx5_1", "0000:1c:00.0", 0),
        ("NIC2", "mlx5_4", "0000:02:00.0", 0),
        ("NIC3", "mlx5_5", "0000:1d:00.0", 0),
        ("NIC4", "mlx5_6", "0000:9b:00.0", 1),
        ("NIC5", "mlx5_7", "0000:9b:00.1", 1),
        ("NIC6", "mlx5_8", "0000:a3:00.0", 1),
        ("NIC7", "mlx5_9", "0000:a4:00.0", 1),
        ("NIC8", "mlx5_bond_0", "0000:03:00.0", 0),
    ]
    assert {d["kind"] for d in devices} == {"nic"}
    assert [d["link_layer"] for d in devices] == ["InfiniBand"] * 8 + ["Ethernet"]


def test_it_computes_nvidia_smi_distance_codes_from_gpus_to_nics(
    h100: tuple[Path, list[str]],
) -> None:
    sysfs = h100[0]
    source = InfinibandTopology(sysfs, lambda: ["00000000:18:00.0", "0000:9a:00.0"])
    result = source.topology_devices()
    assert result is not None
    codes = {(link["a"], link["b"]): link["type"] for link in result[1]}
    assert [codes[("GPU0", f"NIC{i}")] for i in range(9)] == [
        "PIX",  # same PCIe switch
        "PXB",  # through a second, nested switch
        "NODE",  # another host bridge of the same NUMA node
        "PHB",  # same host bridge, no common switch
        "SYS",
        "SYS",
        "SYS",
        "SYS",
        "NODE",
    ]
    assert [codes[("GPU1", f"NIC{i}")] for i in range(9)] == (
        ["SYS"] * 4 + ["PIX", "PIX", "NODE", "NODE", "SYS"]
    )
    assert codes[("NIC0", "NIC1")] == "PXB"
    assert codes[("NIC4", "NIC5")] == "PIX"  # two functions of one card
    assert codes[("NIC6", "NIC7")] == "PIX"
    assert codes[("NIC2", "NIC8")] == "PHB"
    assert len(result[1]) == 2 * 9 + 9 * 8 // 2
    assert source.collection_errors() == []


def test_a_gpu_missing_from_sysfs_is_reported_once_and_the_rest_is_kept(
    h100: tuple[Path, list[str]],
) -> None:
    sysfs = h100[0]
    source = InfinibandTopology(sysfs, ["00000000:18:00.0", None, "00000000:CC:00.0"])
    first = source.topology_devices()
    assert first is not None
    assert {link["a"] for link in first[1] if link["a"].startswith("GPU")} == {"GPU0"}
    errors = source.collection_errors()
    assert len(errors) == 1
    assert errors[0]["source"] == "infiniband-topology"
    assert errors[0]["message"].startswith("GPU2 00000000:CC:00.0: not found under")
    source.topology_devices()
    assert source.collection_errors() == []


def test_a_node_without_an_rdma_stack_adds_nothing(tmp_path: Path) -> None:
    assert InfinibandTopology(tmp_path, ["00000000:18:00.0"]).topology_devices() is None


def test_a_software_rdma_device_without_pci_parent_is_listed_without_links(
    tmp_path: Path,
) -> None:
    place_device(tmp_path, GPU0, numa_node=0)
    virtual = tmp_path / "devices/virtual/net/eth0"
    virtual.mkdir(parents=True)
    rxe = tmp_path / "class/infiniband/rxe0"
    (rxe / "ports/1").mkdir(parents=True)
    (rxe / "ports/1/link_layer").write_text("Ethernet\n")
    (rxe / "device").symlink_to(virtual)
    result = InfinibandTopology(tmp_path, ["00000000:18:00.0"]).topology_devices()
    assert result == (
        [
            {
                "id": "NIC0",
                "kind": "nic",
                "name": "rxe0",
                "pci_bus_id": None,
                "numa_node": None,
                "link_layer": "Ethernet",
            }
        ],
        [],
    )
