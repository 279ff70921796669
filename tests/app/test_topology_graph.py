"""The topology graph from hand-made documents: NVLink states applied (down, degraded), the
NVSwitch heuristic's boundary, direct links resolved by PCI bus id, NICs placed by their own
NUMA node, GPUs missing from the topology, and damaged documents that must never raise."""

from __future__ import annotations

from typing import Any

import pytest

from app.topology.graph import NvlinkState, build_graph
from app.topology.pages import describe, edge_meaning, readable


def gpu(index: int, numa: int | None = 0, bus: str | None = None) -> dict[str, Any]:
    return {
        "id": f"GPU{index}",
        "kind": "gpu",
        "numa_node": numa,
        "cpu_affinity": None if numa is None else f"{numa * 8}-{numa * 8 + 7}",
        "pci_bus_id": bus,
    }


def mesh(count: int, code: str, **over: str) -> list[dict[str, str]]:
    """A link between every GPU pair; ``over`` replaces the code of ``"a-b"`` pairs."""
    return [
        {"a": f"GPU{a}", "b": f"GPU{b}", "type": over.get(f"{a}_{b}", code)}
        for a in range(count)
        for b in range(a + 1, count)
    ]


def switch_links(
    gpu_index: int, *, links: int = 18, down: tuple[int, ...] = ()
) -> list[NvlinkState]:
    return [
        NvlinkState(
            gpu_index,
            n,
            "down" if n in down else "up",
            "nvswitch",
            f"00000000:{0xC7 + n % 4:02X}:00.0",
        )
        for n in range(links)
    ]


def test_a_down_link_to_an_nvswitch_marks_that_gpus_fabric_edge_down() -> None:
    document = {"devices": [gpu(i, numa=i // 4) for i in range(8)], "links": mesh(8, "NV18")}
    states = [s for i in range(8) for s in switch_links(i, down=(7, 9) if i == 3 else ())]
    graph = build_graph(document, states)
    assert graph.nvswitch_reason == "the NVLink readings name NVSwitches as the links' remote ends"
    fabric = graph.node("nvswitch")
    assert (fabric.label, fabric.detail) == ("NVSwitch", "4 NVSwitches")
    edge = graph.edge("GPU3", "nvswitch")
    assert (edge.code, edge.label, edge.state) == ("NV18", "NV18 · 2 down", "down")
    assert graph.node("GPU3").state == "down"
    assert graph.node("GPU3").down_links == [7, 9]
    others = [e for e in graph.edges if e.kind == "nvlink" and e.a != "GPU3"]
    assert [(e.a, e.label, e.state) for e in others] == [
        (f"GPU{i}", "NV18", "up") for i in (0, 1, 2, 4, 5, 6, 7)
    ]
    assert not any(e.b.startswith("GPU") for e in graph.edges if e.kind == "nvlink")
    assert describe(graph) == (
        "8 GPU(s), 0 NIC(s), 2 CPU/NUMA node(s), 0 PCIe switch node(s); GPUs connected through "
        "an NVSwitch fabric; NVLink down on GPU3–NVSwitch."
    )


def test_a_gpu_with_fewer_links_than_its_peers_is_drawn_degraded() -> None:
    # What the agent's topology says after a link went down: that GPU's pairs read NV17.
    over = {f"{min(a, 2)}_{max(a, 2)}": "NV17" for a in range(8) if a != 2}
    document = {"devices": [gpu(i) for i in range(8)], "links": mesh(8, "NV18", **over)}
    graph = build_graph(document)
    assert graph.nvswitch_reason is not None and graph.nvswitch_reason.startswith("GPU0 has 125")
    edge = graph.edge("GPU2", "nvswitch")
    assert (edge.code, edge.label, edge.state) == ("NV17", "NV17 of NV18", "degraded")
    assert graph.edge("GPU0", "nvswitch").label == "NV18"


def test_four_gpus_with_direct_nv4_pairs_stay_a_mesh_of_direct_links() -> None:
    # HGX A100 4-GPU: 3 peers x NV4 = 12 links per GPU, within one GPU's 12: direct cables.
    graph = build_graph({"devices": [gpu(i) for i in range(4)], "links": mesh(4, "NV4")})
    assert graph.nvswitch_reason is None
    assert graph.count("nvswitch") == 0
    nv = [(e.a, e.b, e.label) for e in graph.edges if e.kind == "nvlink"]
    assert nv == [
        ("GPU0", "GPU1", "NV4"),
        ("GPU0", "GPU2", "NV4"),
        ("GPU0", "GPU3", "NV4"),
        ("GPU1", "GPU2", "NV4"),
        ("GPU1", "GPU3", "NV4"),
        ("GPU2", "GPU3", "NV4"),
    ]


def test_a_direct_link_down_is_found_by_the_remote_pci_bus_id_in_either_spelling() -> None:
    document = {
        "devices": [
            gpu(0, bus="0000:3b:00.0"),
            gpu(1, bus="0000:5e:00.0"),
            gpu(2, bus="0000:86:00.0"),
        ],
        "links": mesh(3, "PHB", **{"0_1": "NV2", "1_2": "NV2"}),
    }
    states = [
        NvlinkState(0, 1, "down", "gpu", "00000000:5E:00.0"),
        NvlinkState(1, 0, "down", "gpu", "00000000:3B:00.0"),  # the same cable seen from GPU1
        NvlinkState(1, 2, "up", "gpu", "00000000:86:00.0"),
    ]
    graph = build_graph(document, states)
    assert graph.nvswitch_reason is None
    down = graph.edge("GPU0", "GPU1")
    assert (down.label, down.state) == ("NV2 · 1 down", "down")
    assert graph.edge("GPU1", "GPU2").state == "up"
    assert graph.node("GPU0").down_links == [1]
    assert graph.node("GPU1").down_links == [0]
    assert graph.node("GPU2").state == "ok"


def test_a_down_link_whose_remote_end_is_unknown_marks_the_gpu_and_warns() -> None:
    document = {"devices": [gpu(i) for i in range(3)], "links": mesh(3, "NV2")}
    graph = build_graph(document, [NvlinkState(1, 4, "down", "gpu", None)])
    assert graph.node("GPU1").state == "down"
    assert all(e.state == "up" for e in graph.edges)
    assert graph.warnings == ["GPU1 NVLink 4 is down; its remote end is not in the topology"]


def test_nics_with_their_own_numa_node_are_placed_there_even_when_sys_to_all_gpus() -> None:
    document = {
        "devices": [
            gpu(0, numa=0),
            gpu(1, numa=1),
            {"id": "NIC0", "kind": "nic", "name": "mlx5_0", "numa_node": 1},
        ],
        "links": [
            {"a": "GPU0", "b": "GPU1", "type": "SYS"},
            {"a": "GPU0", "b": "NIC0", "type": "SYS"},
            {"a": "GPU1", "b": "NIC0", "type": "SOC"},
        ],
    }
    graph = build_graph(document)
    assert graph.cpu_of("NIC0") == graph.cpu_of("GPU1") == "cpu-1"
    assert graph.node("cpu-1").label == "NUMA 1"
    # SYS between two devices of one NUMA node contradicts itself: no host bridge count.
    assert graph.node("cpu-1").host_bridges is None
    assert graph.edge("cpu-0", "cpu-1").label == "SYS"


def test_gpus_the_server_knows_but_the_topology_lacks_are_drawn_missing() -> None:
    graph = build_graph(
        {
            "partial": True,
            "errors": ["GPU2: NVML_ERROR_GPU_IS_LOST"],
            "devices": [gpu(0), gpu(1)],
            "links": mesh(2, "PIX"),
        },
        known_gpu_indexes=[0, 1, 2],
    )
    assert graph.partial is True
    assert graph.errors == ["GPU2: NVML_ERROR_GPU_IS_LOST"]
    missing = graph.node("GPU2")
    assert (missing.state, missing.detail, graph.cpu_of("GPU2")) == (
        "missing",
        "not in topology",
        None,
    )
    assert graph.parent("GPU0") == graph.parent("GPU1") == "pcie-1"


@pytest.mark.parametrize(
    ("document", "warnings"),
    [
        (None, ["the stored topology is not a JSON object", "the topology lists no devices"]),
        ({"devices": "GPU0"}, ["the topology lists no devices"]),
        (
            {"devices": [gpu(0)], "links": {"a": "GPU0"}},
            ["the topology's links are not a list: none drawn"],
        ),
        (
            {
                "devices": [
                    {"id": "GPU0", "kind": "gpu", "numa_node": True},
                    {"id": 7, "kind": "nic"},
                ]
            },
            ["devices[1] has no id: not drawn"],
        ),
        (
            {"devices": [gpu(0), gpu(1)], "links": [{"a": "GPU0", "b": "GPU1", "type": "NV-1"}]},
            [
                "1 link(s) carry no nvidia-smi link code",
                "1 device pair(s) have no link code: their connection is unknown",
            ],
        ),
    ],
)
def test_damaged_documents_give_warnings_never_errors(document: Any, warnings: list[str]) -> None:
    graph = build_graph(document)
    assert sorted(graph.warnings) == sorted(warnings)


def test_a_numa_flag_that_is_a_boolean_is_no_numa_node() -> None:
    graph = build_graph({"devices": [{"id": "GPU0", "kind": "gpu", "numa_node": True}]})
    assert graph.node("cpu-0").label == "CPU ?"


def test_the_matrix_input_keeps_only_readable_devices_and_links() -> None:
    assert readable(
        {"devices": [{"id": "GPU0"}, {"kind": "gpu"}, 3], "links": [{"a": "GPU0"}, 1]}
    ) == {
        "devices": [{"id": "GPU0"}],
        "links": [],
    }
    assert readable([1, 2]) == {"devices": [], "links": []}


def test_edge_tooltips_use_nvidia_smis_legend() -> None:
    assert edge_meaning("NV12") == "Connection traversing a bonded set of 12 NVLinks"
    assert edge_meaning("PIX") == "Connection traversing at most a single PCIe bridge"
    assert edge_meaning("XYZ") == ""


def test_nvswitch_remote_ends_without_a_bus_id_make_a_fabric_of_unknown_size() -> None:
    document = {"devices": [gpu(0), gpu(1)], "links": mesh(2, "NV18")}
    states = [NvlinkState(i, n, "up", "nvswitch", None) for i in range(2) for n in range(18)]
    graph = build_graph(document, states)
    assert graph.node("nvswitch").detail == "NVLink fabric"
    assert [(e.a, e.b, e.label) for e in graph.edges if e.kind == "nvlink"] == [
        ("GPU0", "nvswitch", "NV18"),
        ("GPU1", "nvswitch", "NV18"),
    ]
    one = build_graph(document, [NvlinkState(0, 0, "up", "nvswitch", "0000:c7:00.0")])
    assert one.node("nvswitch").detail == "1 NVSwitch"
