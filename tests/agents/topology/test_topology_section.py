"""The payload's ``topology`` devices and links built from ``topo -m``, and the P2P matrix."""

from __future__ import annotations

import pytest

from agents.topology.matrix import (
    TopoParseError,
    parse_p2p_matrix,
    parse_topo_matrix,
    topology_section,
)
from tests.shared_fixtures import fixture_path


def _text(name: str) -> str:
    return fixture_path(f"topo/{name}").read_text(encoding="utf-8")


def test_it_builds_devices_and_each_link_once_without_self() -> None:
    matrix = parse_topo_matrix(_text("puget-threadripper-2gpu-2nic-phb.txt"))
    section = topology_section(matrix, {0: "GPU-aaaa", 1: "GPU-bbbb"})
    assert section["devices"] == [
        {"id": "GPU0", "kind": "gpu", "gpu_uuid": "GPU-aaaa", "pci_bus_id": None,
         "numa_node": 0, "cpu_affinity": "0-23"},
        {"id": "GPU1", "kind": "gpu", "gpu_uuid": "GPU-bbbb", "pci_bus_id": None,
         "numa_node": 0, "cpu_affinity": "0-23"},
        {"id": "NIC0", "kind": "nic", "name": "mlx5_0", "pci_bus_id": None, "numa_node": None,
         "link_layer": None},
        {"id": "NIC1", "kind": "nic", "name": "mlx5_1", "pci_bus_id": None, "numa_node": None,
         "link_layer": None},
    ]  # fmt: skip
    assert section["links"] == [
        {"a": "GPU0", "b": "GPU1", "type": "PHB"},
        {"a": "GPU0", "b": "NIC0", "type": "NODE"},
        {"a": "GPU0", "b": "NIC1", "type": "NODE"},
        {"a": "GPU1", "b": "NIC0", "type": "NODE"},
        {"a": "GPU1", "b": "NIC1", "type": "NODE"},
        {"a": "NIC0", "b": "NIC1", "type": "PIX"},
    ]


def test_an_8_gpu_nvswitch_mesh_gives_28_nv18_links() -> None:
    section = topology_section(parse_topo_matrix(_text("h100-8gpu-nv18-condensed.txt")))
    assert len(section["links"]) == 28
    assert {link["type"] for link in section["links"]} == {"NV18"}
    assert section["links"][6] == {"a": "GPU0", "b": "GPU7", "type": "NV18"}
    assert [d["gpu_uuid"] for d in section["devices"]] == [None] * 8


def test_old_soc_codes_are_sent_as_sys_with_nic_ids_numbered() -> None:
    section = topology_section(
        parse_topo_matrix(_text("power8-minsky-4gpu-nv2-soc-smt-affinity.txt"))
    )
    links = {(link["a"], link["b"]): link["type"] for link in section["links"]}
    assert links[("GPU0", "GPU1")] == "NV2"
    assert links[("GPU0", "GPU2")] == "SYS"
    assert links[("GPU3", "NIC1")] == "SYS"
    assert links[("NIC0", "NIC1")] == "PIX"
    assert "SOC" not in links.values()
    assert len(links) == 15


def test_the_dgx_matrix_with_ten_nics_gives_every_pair_once() -> None:
    section = topology_section(parse_topo_matrix(_text("dgx-a100-8gpu-10nic-tabs.txt")))
    assert len(section["devices"]) == 18
    assert len(section["links"]) == 18 * 17 // 2
    assert {"a": "GPU0", "b": "NIC0", "type": "PXB"} in section["links"]
    assert {"a": "NIC8", "b": "NIC9", "type": "PIX"} in section["links"]


def test_a_gpu_numa_id_is_sent_only_where_the_driver_prints_one() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-71\t0\t\t4\n"
    device = topology_section(parse_topo_matrix(text))["devices"][0]
    assert device["gpu_numa_id"] == 4
    windows = topology_section(
        parse_topo_matrix(_text("windows-rtx-2080-super-empty-affinity.txt"))
    )
    assert windows["devices"] == [
        {"id": "GPU0", "kind": "gpu", "gpu_uuid": None, "pci_bus_id": None, "numa_node": None,
         "cpu_affinity": None}
    ]  # fmt: skip
    assert windows["links"] == []


def test_p2p_read_matrix_of_eight_h100_is_ok_everywhere_off_the_diagonal() -> None:
    matrix = parse_p2p_matrix(_text("h100-8gpu-p2p-read-ok.txt"))
    assert matrix.gpus == tuple(f"GPU{i}" for i in range(8))
    assert {matrix.status(f"GPU{a}", f"GPU{b}") for a in range(8) for b in range(8) if a != b} == {
        "OK"
    }
    assert matrix.status("GPU3", "GPU3") == "X"
    assert matrix.legend == {
        "X": "Self",
        "OK": "Status Ok",
        "CNS": "Chipset not supported",
        "GNS": "GPU not supported",
        "TNS": "Topology not supported",
        "NS": "Not supported",
        "U": "Unknown",
    }


def test_p2p_matrix_of_two_l4_says_chipset_not_supported_without_a_legend() -> None:
    matrix = parse_p2p_matrix(_text("l4-2gpu-p2p-read-cns.txt"))
    assert matrix.gpus == ("GPU0", "GPU1")
    assert matrix.status("GPU0", "GPU1") == "CNS"
    assert matrix.status("GPU1", "GPU0") == "CNS"
    assert matrix.legend == {}


def test_p2p_parser_refuses_error_output() -> None:
    with pytest.raises(TopoParseError, match="Option -m"):
        parse_p2p_matrix(_text("windows-rtx-2080-super-topo-m-error.txt"))
