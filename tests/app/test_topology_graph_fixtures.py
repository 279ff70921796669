"""The topology graph built from every real ``nvidia-smi topo -m`` capture in
``../shared/fixtures/topo``: parsed by the agent's parser, turned into the stored document the way
ingest does, then drawn. Expectations follow nvidia-smi's legend (see the line of each file in
``../shared/fixtures/SOURCES.md``): PIX = one PCIe switch, PXB = several bridges below the host
bridge, PHB/NODE = one NUMA node, SYS/SOC = across NUMA nodes; NV12/NV18 8-GPU meshes are
NVSwitch systems."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from agents.topology.matrix import TopoParseError, parse_topo_matrix, topology_section
from app.topology.graph import TopologyGraph, build_graph
from app.topology.schemas import TopologyIn
from app.topology.service import topology_document
from tests.shared_fixtures import fixture_names, fixture_path

BEYOND_18 = "NVLinks to its peers in all, more than one GPU has (18): they go through NVSwitches"


@dataclass(frozen=True)
class Expected:
    """Node counts by kind; per CPU node in drawing order its label, PCIe host bridges (None:
    NVLink hides the PCIe path) and devices; PCIe switch → children; edges by kind and label;
    why it is an NVSwitch system (None: it is not)."""

    counts: dict[str, int]
    groups: list[tuple[str, int | None, str]]
    switches: dict[str, str]
    edges: dict[str, int]
    nvswitch: str | None


def stored_document(name: str) -> dict[str, Any]:
    """The document the server stores for the capture ``name``, as the agent's nvidia-smi
    collector sends it (no GPU UUIDs) and ingest validates and cleans it."""
    matrix = parse_topo_matrix(fixture_path(f"topo/{name}").read_text())
    body = topology_section(matrix)
    topology = TopologyIn.model_validate({"collected_at": "2026-11-29T12:00:00Z", **body})
    document, dropped = topology_document(topology, nulled=Counter())
    assert dropped == 0
    return document


def summary(graph: TopologyGraph) -> Expected:
    groups = [
        (
            cpu.label,
            cpu.host_bridges,
            " ".join(
                n.id
                for n in graph.nodes
                if n.kind in ("gpu", "nic") and graph.cpu_of(n.id) == cpu.id
            ),
        )
        for cpu in graph.nodes
        if cpu.kind == "cpu"
    ]
    return Expected(
        counts={k: graph.count(k) for k in ("cpu", "pcie_switch", "nvswitch", "gpu", "nic")},
        groups=groups,
        switches={k: " ".join(v) for k, v in graph.children.items() if k.startswith("pcie")},
        edges=dict(sorted(Counter(f"{e.kind} {e.label}" for e in graph.edges).items())),
        nvswitch=graph.nvswitch_reason,
    )


EXPECTED: dict[str, Expected] = {
    # 7 peers x NV12 = 84 links from one GPU: through NVSwitches. NVLink hides the PCIe path.
    "a100-8gpu-nv12-condensed.txt": Expected(
        counts={"cpu": 2, "pcie_switch": 0, "nvswitch": 1, "gpu": 8, "nic": 0},
        groups=[("NUMA 0", None, "GPU0 GPU1 GPU2 GPU3"), ("NUMA 1", None, "GPU4 GPU5 GPU6 GPU7")],
        switches={},
        edges={"nvlink NV12": 8, "pcie PHB": 8, "smp SYS": 1},
        nvswitch=f"GPU0 has 84 {BEYOND_18}",
    ),
    # GPUs NODE to each other (separate host bridges), NIC pairs PIX: one switch per pair.
    "asus-esc8000a-e12-4gpu-4nic-2numa-amd.txt": Expected(
        counts={"cpu": 2, "pcie_switch": 2, "nvswitch": 0, "gpu": 4, "nic": 4},
        groups=[("NUMA 0", 3, "GPU0 GPU1 NIC0 NIC1"), ("NUMA 1", 3, "GPU2 GPU3 NIC2 NIC3")],
        switches={"pcie-1": "NIC0 NIC1", "pcie-2": "NIC2 NIC3"},
        edges={"pcie PHB": 6, "pcie PIX": 4, "smp SYS": 1},
        nvswitch=None,
    ),
    # GPU pairs and NIC pairs PXB below one switch tree per NUMA node (3/1/7/5); the storage
    # NICs NIC8/NIC9 are PIX to each other and SYS to every GPU: a NUMA node without GPUs.
    "dgx-a100-8gpu-10nic-tabs.txt": Expected(
        counts={"cpu": 5, "pcie_switch": 5, "nvswitch": 1, "gpu": 8, "nic": 10},
        groups=[
            ("NUMA 1", 1, "GPU2 GPU3 NIC2 NIC3"),
            ("NUMA 3", 1, "GPU0 GPU1 NIC0 NIC1"),
            ("NUMA 5", 1, "GPU6 GPU7 NIC6 NIC7"),
            ("NUMA 7", 1, "GPU4 GPU5 NIC4 NIC5"),
            ("NUMA ?", 1, "NIC8 NIC9"),
        ],
        switches={
            "pcie-1": "GPU2 GPU3 NIC2 NIC3",
            "pcie-2": "GPU0 GPU1 NIC0 NIC1",
            "pcie-3": "GPU6 GPU7 NIC6 NIC7",
            "pcie-4": "GPU4 GPU5 NIC4 NIC5",
            "pcie-5": "NIC8 NIC9",
        },
        edges={"nvlink NV12": 8, "pcie PHB": 5, "pcie PIX": 2, "pcie PXB": 16, "smp SYS": 4},
        nvswitch=f"GPU0 has 84 {BEYOND_18}",
    ),
    # One NV2 pair (an NVLink bridge): a direct edge.
    "dual-gpu-nv2-no-legend.txt": Expected(
        counts={"cpu": 1, "pcie_switch": 0, "nvswitch": 0, "gpu": 2, "nic": 0},
        groups=[("CPU", None, "GPU0 GPU1")],
        switches={},
        edges={"nvlink NV2": 1, "pcie PHB": 2},
        nvswitch=None,
    ),
    "dual-gpu-phb-no-nvlink.txt": Expected(
        counts={"cpu": 1, "pcie_switch": 0, "nvswitch": 0, "gpu": 2, "nic": 0},
        groups=[("CPU", 1, "GPU0 GPU1")],
        switches={},
        edges={"pcie PHB": 2},
        nvswitch=None,
    ),
    "gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt": Expected(
        counts={"cpu": 2, "pcie_switch": 0, "nvswitch": 1, "gpu": 8, "nic": 0},
        groups=[("NUMA 0", None, "GPU0 GPU1 GPU2 GPU3"), ("NUMA 1", None, "GPU4 GPU5 GPU6 GPU7")],
        switches={},
        edges={"nvlink NV18": 8, "pcie PHB": 8, "smp SYS": 1},
        nvswitch=f"GPU0 has 126 {BEYOND_18}",
    ),
    # GPU0/2/4/6 share a PCIe switch (PIX) with two NICs each; GPU1/3/5/7 hang off the CPU.
    "h100-8gpu-8nic-2nics-per-gpu-pair-sglang-env.txt": Expected(
        counts={"cpu": 2, "pcie_switch": 4, "nvswitch": 1, "gpu": 8, "nic": 8},
        groups=[
            ("NUMA 0", None, "GPU0 GPU1 GPU2 GPU3 NIC0 NIC1 NIC2 NIC3"),
            ("NUMA 1", None, "GPU4 GPU5 GPU6 GPU7 NIC4 NIC5 NIC6 NIC7"),
        ],
        switches={
            "pcie-1": "GPU0 NIC0 NIC1",
            "pcie-2": "GPU2 NIC2 NIC3",
            "pcie-3": "GPU4 NIC4 NIC5",
            "pcie-4": "GPU6 NIC6 NIC7",
        },
        edges={"nvlink NV18": 8, "pcie PHB": 8, "pcie PIX": 12, "smp SYS": 1},
        nvswitch=f"GPU0 has 126 {BEYOND_18}",
    ),
    "h100-8gpu-nv18-condensed.txt": Expected(
        counts={"cpu": 2, "pcie_switch": 0, "nvswitch": 1, "gpu": 8, "nic": 0},
        groups=[("NUMA 0", None, "GPU0 GPU1 GPU2 GPU3"), ("NUMA 1", None, "GPU4 GPU5 GPU6 GPU7")],
        switches={},
        edges={"nvlink NV18": 8, "pcie PHB": 8, "smp SYS": 1},
        nvswitch=f"GPU0 has 126 {BEYOND_18}",
    ),
    "h100-single-gpu-vm-ansi-header.txt": Expected(
        counts={"cpu": 1, "pcie_switch": 0, "nvswitch": 0, "gpu": 1, "nic": 0},
        groups=[("NUMA 0", 1, "GPU0")],
        switches={},
        edges={"pcie PHB": 1},
        nvswitch=None,
    ),
    "l40s-single-gpu-ansi-header.txt": Expected(
        counts={"cpu": 1, "pcie_switch": 0, "nvswitch": 0, "gpu": 1, "nic": 0},
        groups=[("NUMA 0", 1, "GPU0")],
        switches={},
        edges={"pcie PHB": 1},
        nvswitch=None,
    ),
    # NIC pairs PIX (one switch each) and PXB to their GPU pair (one tree per NUMA node); NIC0
    # and NIC13 are SYS to everything, each other included: two GPU-less NUMA nodes.
    "oci-bm-gpu4-8-a100-8gpu-18nic.txt": Expected(
        counts={"cpu": 6, "pcie_switch": 12, "nvswitch": 1, "gpu": 8, "nic": 18},
        groups=[
            ("NUMA 1", 1, "GPU2 GPU3 NIC1 NIC2 NIC3 NIC4"),
            ("NUMA 3", 1, "GPU0 GPU1 NIC5 NIC6 NIC7 NIC8"),
            ("NUMA 5", 1, "GPU6 GPU7 NIC9 NIC10 NIC11 NIC12"),
            ("NUMA 7", 1, "GPU4 GPU5 NIC14 NIC15 NIC16 NIC17"),
            ("NUMA ?", 1, "NIC0"),
            ("NUMA ?", 1, "NIC13"),
        ],
        switches={
            "pcie-1": "NIC1 NIC2",
            "pcie-2": "NIC3 NIC4",
            "pcie-3": "GPU2 GPU3 pcie-1 pcie-2",
            "pcie-4": "NIC5 NIC6",
            "pcie-5": "NIC7 NIC8",
            "pcie-6": "GPU0 GPU1 pcie-4 pcie-5",
            "pcie-7": "NIC9 NIC10",
            "pcie-8": "NIC11 NIC12",
            "pcie-9": "GPU6 GPU7 pcie-7 pcie-8",
            "pcie-10": "NIC14 NIC15",
            "pcie-11": "NIC16 NIC17",
            "pcie-12": "GPU4 GPU5 pcie-10 pcie-11",
        },
        edges={"nvlink NV12": 8, "pcie PHB": 6, "pcie PIX": 16, "pcie PXB": 16, "smp SYS": 5},
        nvswitch=f"GPU0 has 84 {BEYOND_18}",
    ),
    # Two 4-GPU PIX switches joined by PXB (an upstream switch); mlx5_0 is SOC (SYS) to every
    # GPU: on the other socket. No NUMA column, so the CPU is named by its CPU Affinity.
    "p40-8gpu-pcie-switch-pix-pxb-soc-old-format.txt": Expected(
        counts={"cpu": 2, "pcie_switch": 3, "nvswitch": 0, "gpu": 8, "nic": 1},
        groups=[("CPU", 1, "GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7"), ("NUMA ?", 1, "NIC0")],
        switches={
            "pcie-1": "GPU0 GPU1 GPU2 GPU3",
            "pcie-2": "GPU4 GPU5 GPU6 GPU7",
            "pcie-3": "pcie-1 pcie-2",
        },
        edges={"pcie PHB": 2, "pcie PIX": 8, "pcie PXB": 2, "smp SYS": 1},
        nvswitch=None,
    ),
    # NV2 pairs (2 links: direct, no NVSwitch), SOC between the pairs: two CPUs by affinity.
    "power8-minsky-4gpu-nv2-soc-smt-affinity.txt": Expected(
        counts={"cpu": 3, "pcie_switch": 1, "nvswitch": 0, "gpu": 4, "nic": 2},
        groups=[("CPU", None, "GPU0 GPU1"), ("CPU", None, "GPU2 GPU3"), ("NUMA ?", 1, "NIC0 NIC1")],
        switches={"pcie-1": "NIC0 NIC1"},
        edges={"nvlink NV2": 2, "pcie PHB": 5, "pcie PIX": 2, "smp SYS": 2},
        nvswitch=None,
    ),
    # GPUs PHB (one host bridge), the NIC pair behind its own switch, NODE to the GPUs: 2 bridges.
    "puget-threadripper-2gpu-2nic-phb.txt": Expected(
        counts={"cpu": 1, "pcie_switch": 1, "nvswitch": 0, "gpu": 2, "nic": 2},
        groups=[("NUMA 0", 2, "GPU0 GPU1 NIC0 NIC1")],
        switches={"pcie-1": "NIC0 NIC1"},
        edges={"pcie PHB": 3, "pcie PIX": 2},
        nvswitch=None,
    ),
    # Windows prints no CPU/NUMA affinity: the GPU's CPU is unknown.
    "windows-rtx-2080-super-empty-affinity.txt": Expected(
        counts={"cpu": 1, "pcie_switch": 0, "nvswitch": 0, "gpu": 1, "nic": 0},
        groups=[("CPU ?", 1, "GPU0")],
        switches={},
        edges={"pcie PHB": 1},
        nvswitch=None,
    ),
}
NOT_TOPO_M = {
    # ``topo -p2p r`` matrices: their OK/CNS cells are no link codes; the agent leaves them out
    # and sends a partial topology that names them.
    "h100-8gpu-p2p-read-ok.txt": "partial",
    "l4-2gpu-p2p-read-cns.txt": "partial",
    # nvidia-smi's error text instead of a matrix: the agent sends a partial, empty topology.
    "windows-rtx-2080-super-topo-m-error.txt": "parse",
}


def test_every_capture_has_an_expectation() -> None:
    names = fixture_names("topo")
    if not names:
        fixture_path("topo")  # skips, or fails under CI
    assert set(names) == set(EXPECTED) | set(NOT_TOPO_M)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_is_drawn_per_nvidia_smi_semantics(name: str) -> None:
    graph = build_graph(stored_document(name))
    assert summary(graph) == EXPECTED[name]
    assert graph.warnings == []
    assert graph.partial is False


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_layout_keeps_boxes_apart_and_inside_the_drawing(name: str) -> None:
    graph = build_graph(stored_document(name))
    for node in graph.nodes:
        assert node.x > 0 and node.x + node.w <= graph.width, node.id
        assert node.y > 0 and node.y + node.h <= graph.height, node.id
    rows: dict[float, list[tuple[float, float]]] = {}
    for node in graph.nodes:
        rows.setdefault(node.y, []).append((node.x, node.x + node.w))
    for spans in rows.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert all(e.path.startswith("M") for e in graph.edges)


P2P_CELLS = {
    "h100-8gpu-p2p-read-ok.txt": (28, "GPU0-GPU1 'OK'"),
    "l4-2gpu-p2p-read-cns.txt": (1, "GPU0-GPU1 'CNS'"),
}


def test_p2p_matrices_are_sent_as_partial_topologies_without_links() -> None:
    """A ``topo -p2p`` status (OK, CNS…) is no link type: the agent draws no link from it and
    says which cells it left out, and ingest stores that document as it is (partial, no links)
    rather than refusing the node's whole topology."""
    for name, kind in NOT_TOPO_M.items():
        text = fixture_path(f"topo/{name}").read_text()
        if kind == "parse":
            with pytest.raises(TopoParseError, match="no nvidia-smi topology matrix"):
                parse_topo_matrix(text)
            continue
        body = topology_section(parse_topo_matrix(text))
        cells, first = P2P_CELLS[name]
        assert body["links"] == []
        assert body["partial"] is True
        assert body["errors"][0].startswith(
            f"nvidia-smi topo -m: {cells} cell(s) hold no link code"
        )
        assert first in body["errors"][0]
        topology = TopologyIn.model_validate({"collected_at": "2026-11-29T12:00:00Z", **body})
        assert topology.links == [] and topology.partial is True
        assert [d.id for d in topology.devices] == [f"GPU{i}" for i in range(len(topology.devices))]


def test_the_agents_document_for_topo_m_error_output_draws_nothing_but_says_why() -> None:
    text = fixture_path("topo/windows-rtx-2080-super-topo-m-error.txt").read_text()
    with pytest.raises(TopoParseError) as caught:
        parse_topo_matrix(text)
    sent = {
        "collected_at": "2026-11-29T12:00:00Z",
        "source": "nvidia-smi",
        "partial": True,
        "errors": [str(caught.value)],
        "devices": [],
        "links": [],
    }
    document, _ = topology_document(TopologyIn.model_validate(sent), nulled=Counter())
    graph = build_graph(document, known_gpu_indexes=[0])
    assert graph.partial is True
    assert graph.errors == [
        "no nvidia-smi topology matrix (a header naming GPU0 …) found: it starts with "
        "\"ERROR: Option -m is missing its value. Please run 'nvidia-smi -h' for help.\""
    ]
    assert [(n.id, n.state) for n in graph.nodes] == [("GPU0", "missing")]
    assert graph.edges == []
    assert graph.warnings == ["GPU0 is not in the topology: drawn apart, unconnected"]
