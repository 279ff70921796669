"""Drift detection on real ``nvidia-smi topo -m`` captures: a group of identical DGX A100 nodes and
one whose matrix is altered in memory, parsed by the agent's parser and stored as ingest does."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from agents.topology.matrix import parse_topo_matrix, topology_section
from app.topology.drift import DriftFinding, compare_group
from app.topology.schemas import TopologyIn
from app.topology.service import topology_document
from app.topology.signature import GpuFacts, NodeSignature, build_signature
from tests.shared_fixtures import fixture_path

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
POD = {"ib_pod": "pod-01", "rack": "r01"}
GROUP = f"ib_pod=pod-01 · 8× {A100}"


def stored(name: str, **over: Any) -> dict[str, Any]:
    """The document ingest stores for the capture ``topo/<name>`` as the agent sends it."""
    matrix = parse_topo_matrix(fixture_path(f"topo/{name}").read_text())
    section = {"collected_at": "2026-11-29T12:00:00Z", "source": "nvidia-smi"}
    section.update(topology_section(matrix))
    section.update(over)
    document, _ = topology_document(TopologyIn.model_validate(section), nulled=Counter())
    return document


def inventory(model: str, count: int = 8, **pcie: int) -> list[GpuFacts]:
    return [GpuFacts(index=i, name=model, **pcie) for i in range(count)]


def node(host: str, document: dict[str, Any], model: str = A100, **kw: Any) -> NodeSignature:
    gpus = kw.pop("gpus", inventory(model))
    return build_signature(host, labels=kw.pop("labels", POD), document=document, gpus=gpus, **kw)


def fleet(altered: dict[str, Any], count: int = 8) -> dict[str, NodeSignature]:
    """``count`` unaltered DGX A100 nodes ``dgx-01…`` plus ``dgx-odd`` with ``altered``."""
    dgx = stored("dgx-a100-8gpu-10nic-tabs.txt")
    nodes = {f"dgx-{i:02d}": node(f"dgx-{i:02d}", dgx) for i in range(1, count + 1)}
    nodes["dgx-odd"] = node("dgx-odd", altered)
    return nodes


def link(document: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    return next(x for x in document["links"] if {x["a"], x["b"]} == {a, b})


def test_identical_dgx_nodes_have_no_drift() -> None:
    dgx = stored("dgx-a100-8gpu-10nic-tabs.txt")
    assert compare_group({f"dgx-{i}": node(f"dgx-{i}", dgx) for i in range(8)}) == []


def test_an_nvlink_pair_with_fewer_links_is_named_with_the_majority() -> None:
    odd = stored("dgx-a100-8gpu-10nic-tabs.txt")
    link(odd, "GPU3", "GPU5")["type"] = "NV6"

    assert compare_group(fleet(odd, count=7)) == [
        DriftFinding(
            "dgx-odd",
            GROUP,
            "nvlink_fewer",
            "GPU3↔GPU5: NV12 expected (7 of 8 nodes), NV6 here",
            "NV12",
            "NV6",
        )
    ]


def test_a_missing_nic_row_is_reported_once_not_per_link() -> None:
    odd = stored("dgx-a100-8gpu-10nic-tabs.txt")
    odd["devices"] = [d for d in odd["devices"] if d.get("name") != "mlx5_4"]
    odd["links"] = [x for x in odd["links"] if "NIC4" not in (x["a"], x["b"])]

    findings = compare_group(fleet(odd, count=15))

    assert findings == [
        DriftFinding(
            "dgx-odd",
            GROUP,
            "nic_missing",
            "mlx5_4 missing (present on 15 of 16 nodes)",
            "present",
            "missing",
        )
    ]


def test_a_changed_numa_affinity_and_a_pix_made_sys_are_both_reported() -> None:
    odd = stored("dgx-a100-8gpu-10nic-tabs.txt")
    next(d for d in odd["devices"] if d["id"] == "GPU2")["numa_node"] = 7
    link(odd, "GPU2", "NIC2")["type"] = "SYS"

    assert [(f.kind, f.detail) for f in compare_group(fleet(odd))] == [
        ("link_type", "GPU2↔mlx5_2: PXB expected (8 of 9 nodes), SYS here"),
        ("numa", "GPU2: NUMA node 1 expected (8 of 9 nodes), 7 here"),
    ]


def test_a_lost_gpu_is_missing_and_its_links_are_not_reported_again() -> None:
    dgx = stored("dgx-a100-8gpu-10nic-tabs.txt")
    nodes = fleet(dgx)
    lost = inventory(A100)
    lost[5] = GpuFacts(index=5, name=A100, state="lost")
    nodes["dgx-odd"] = node("dgx-odd", dgx, gpus=lost)

    assert compare_group(nodes) == [
        DriftFinding(
            "dgx-odd",
            GROUP,
            "gpu_missing",
            "GPU5 missing (present on 8 of 9 nodes)",
            "present",
            "missing",
        )
    ]


def test_nvlinks_down_nic_down_and_pcie_downtrained_from_the_readings() -> None:
    dgx = stored("dgx-a100-8gpu-10nic-tabs.txt")
    ok_ports = {f"mlx5_{i}": ["ACTIVE"] for i in range(10)}
    nodes = {
        f"dgx-{i}": node(f"dgx-{i}", dgx, nvlinks_up={0: 12, 1: 12}, nic_port_states=ok_ports)
        for i in range(3)
    }
    nodes["dgx-odd"] = node(
        "dgx-odd",
        dgx,
        gpus=[*inventory(A100, 7), GpuFacts(7, A100, "ok", 3, 4, 16, 16)],
        nvlinks_up={0: 12, 1: 10},
        nic_port_states={**ok_ports, "mlx5_4": ["DOWN"]},
    )

    assert [(f.kind, f.detail, f.expected, f.actual) for f in compare_group(nodes)] == [
        ("nvlink_fewer", "GPU1: 12 NVLinks up expected (3 of 4 nodes), 10 here", "12", "10"),
        (
            "nic_down",
            "mlx5_4: port state ACTIVE expected (3 of 4 nodes), DOWN here",
            "ACTIVE",
            "DOWN",
        ),
        (
            "pcie_downtrained",
            "GPU7: PCIe link gen3 x16 here, gen4 x16 is its maximum",
            "gen4 x16",
            "gen3 x16",
        ),
    ]


def test_h100_and_a100_nodes_in_one_pod_are_not_compared_with_each_other() -> None:
    a100 = stored("dgx-a100-8gpu-10nic-tabs.txt")
    h100 = stored("gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt")
    nodes = {f"a-{i}": node(f"a-{i}", a100) for i in range(2)}
    nodes |= {f"h-{i}": node(f"h-{i}", h100, model=H100) for i in range(3)}

    assert compare_group(nodes) == []
    assert {s.group for s in nodes.values()} == {GROUP, f"ib_pod=pod-01 · 8× {H100}"}


def test_a_tie_says_there_is_no_majority_instead_of_guessing() -> None:
    a = stored("a100-8gpu-nv12-condensed.txt")
    b = copy.deepcopy(a)
    link(b, "GPU0", "GPU1")["type"] = "NV6"
    nodes = {"n1": node("n1", a), "n2": node("n2", b)}

    assert [(f.hostname, f.kind, f.detail, f.expected, f.actual) for f in compare_group(nodes)] == [
        (
            "n1",
            "no_majority",
            "GPU0↔GPU1: no majority (NV12 on 1 node, NV6 on 1 node), NV12 here",
            None,
            "NV12",
        ),
        (
            "n2",
            "no_majority",
            "GPU0↔GPU1: no majority (NV12 on 1 node, NV6 on 1 node), NV6 here",
            None,
            "NV6",
        ),
    ]


def test_a_partial_topology_is_reported_as_partial_and_not_as_drift_on_its_peers() -> None:
    half = stored("dgx-a100-8gpu-10nic-tabs.txt", partial=True, errors=["nvml: GPU4: TIMEOUT"])
    half["devices"] = [d for d in half["devices"] if d["id"] not in ("GPU4", "GPU5", "GPU6")]
    half["links"] = [x for x in half["links"] if not {"GPU4", "GPU5", "GPU6"} & {x["a"], x["b"]}]
    nodes = fleet(half, count=1)  # one full node and one partial node: nothing to compare

    assert compare_group(nodes) == [
        DriftFinding(
            "dgx-odd",
            GROUP,
            "partial",
            "topology is partial, not compared: nvml: GPU4: TIMEOUT",
            None,
            "partial",
        )
    ]


def test_nodes_without_a_fabric_label_fall_back_to_rack_cluster_then_ungrouped() -> None:
    dgx = stored("a100-8gpu-nv12-condensed.txt")
    groups = [
        node("x", dgx, labels=labels).group
        for labels in ({"pod": "p1", "rack": "r1"}, {"rack": "r1"}, {"cluster": "c"}, {})
    ]
    assert groups == [
        f"pod=p1 · 8× {A100}",
        f"rack=r1 · 8× {A100}",
        f"cluster=c · 8× {A100}",
        f"ungrouped · 8× {A100}",
    ]


def test_signature_of_the_real_dgx_capture() -> None:
    sig = node("dgx", stored("dgx-a100-8gpu-10nic-tabs.txt"))

    assert sorted(sig.nics) == sorted(f"mlx5_{i}" for i in range(10))
    assert sig.gpu_numa == {
        "GPU0": 3,
        "GPU1": 3,
        "GPU2": 1,
        "GPU3": 1,
        "GPU4": 7,
        "GPU5": 7,
        "GPU6": 5,
        "GPU7": 5,
    }
    assert sig.links[("GPU3", "GPU5")] == "NV12"
    assert sig.links[("mlx5_8", "mlx5_9")] == "PIX"
    assert len(sig.links) == 18 * 17 // 2


def test_more_nvlinks_than_the_majority_is_a_different_link_type_not_fewer() -> None:
    odd = stored("dgx-a100-8gpu-10nic-tabs.txt")
    link(odd, "GPU0", "GPU7")["type"] = "NV18"

    assert [(f.kind, f.detail) for f in compare_group(fleet(odd, count=3))] == [
        ("link_type", "GPU0↔GPU7: NV12 expected (3 of 4 nodes), NV18 here"),
    ]


def test_a_node_that_lists_seven_gpus_is_still_compared_with_its_eight_gpu_peers() -> None:
    odd = stored("dgx-a100-8gpu-10nic-tabs.txt")
    odd["devices"] = [d for d in odd["devices"] if d["id"] != "GPU6"]
    odd["links"] = [x for x in odd["links"] if "GPU6" not in (x["a"], x["b"])]
    nodes = fleet(stored("dgx-a100-8gpu-10nic-tabs.txt"), count=2)
    nodes["dgx-odd"] = node("dgx-odd", odd, gpus=inventory(A100, 7))

    assert nodes["dgx-odd"].group == GROUP
    assert [(f.hostname, f.kind, f.detail) for f in compare_group(nodes)] == [
        ("dgx-odd", "gpu_missing", "GPU6 missing (present on 2 of 3 nodes)"),
    ]


def test_a_different_machine_in_the_same_pod_differs_from_the_dgx_majority() -> None:
    oci = stored("oci-bm-gpu4-8-a100-8gpu-18nic.txt")
    findings = compare_group(fleet(oci, count=3))

    assert {f.hostname for f in findings} == {"dgx-odd"}
    extra = [f.detail for f in findings if f.kind == "nic_extra"]
    assert extra == [f"mlx5_{i} present here (missing on 3 of 4 nodes)" for i in range(10, 18)]
    assert "GPU0↔mlx5_0: PXB expected (3 of 4 nodes), SYS here" in [f.detail for f in findings]
