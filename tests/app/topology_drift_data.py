"""Ingest payloads of DGX A100 and H100 nodes whose topology is a real ``nvidia-smi topo -m``
capture (parsed by the agent's parser, as the agent sends it), with NVLinks, NIC ports and PCIe
readings, for the drift page and API tests."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agents.topology.matrix import parse_topo_matrix, topology_section
from tests.app.section_factories import nic_port, nvlinks
from tests.factories import batch, gpu, iso, sample
from tests.shared_fixtures import fixture_path

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
DGX_A100 = "dgx-a100-8gpu-10nic-tabs.txt"
GCP_H100 = "gcp-a3-h100-8gpu-nv18-tabs-no-nics.txt"


def node_payload(
    hostname: str,
    *,
    capture: str = DGX_A100,
    model: str = A100,
    labels: dict[str, str] | None = None,
    nvlinks_up: int = 12,
    alter: Callable[[dict[str, Any]], None] | None = None,
    down_nics: tuple[str, ...] = (),
    pcie_gen: dict[int, int] | None = None,
) -> dict[str, Any]:
    """One batch: 8 GPUs of ``model``, the capture's topology (changed by ``alter``), every GPU
    with ``nvlinks_up`` up NVLinks, a port per NIC left in the topology (``down_nics`` DOWN)
    and PCIe gen 4 x16 of max gen 4 x16 (``pcie_gen`` overrides the current gen per GPU)."""
    at = datetime.now(UTC) - timedelta(seconds=30)
    gpus = [gpu(i, hostname=hostname, name=model) for i in range(8)]
    matrix = parse_topo_matrix(fixture_path(f"topo/{capture}").read_text())
    section = topology_section(matrix, {g["index"]: g["uuid"] for g in gpus})
    topology = {"collected_at": iso(at), "source": "nvidia-smi", "partial": False, "errors": []}
    topology.update(section)
    if alter:
        alter(topology)
    payload = batch(hostname, gpus=gpus, samples_per_gpu=1, start=at, labels=labels or {})
    payload["samples"] = [
        sample(
            g,
            at,
            pcie_link_gen=(pcie_gen or {}).get(g["index"], 4),
            pcie_link_gen_max=4,
            pcie_link_width=16,
            pcie_link_width_max=16,
        )
        for g in gpus
    ]
    payload["topology"] = topology
    payload["nvlinks"] = [link for g in gpus for link in nvlinks(g, at, links=nvlinks_up)]
    payload["nic_ports"] = [
        nic_port(at, name, state="DOWN" if name in down_nics else "ACTIVE")
        for name in (d.get("name") for d in topology["devices"] if d["kind"] == "nic")
        if name
    ]
    return payload


def set_link(topology: dict[str, Any], a: str, b: str, code: str) -> None:
    """Make the link between devices ``a`` and ``b`` ``code``."""
    next(x for x in topology["links"] if {x["a"], x["b"]} == {a, b})["type"] = code


def drop_nic(topology: dict[str, Any], nic_id: str) -> None:
    """Remove device ``nic_id`` (``NIC4``) and its links, as when the NIC is gone."""
    topology["devices"] = [d for d in topology["devices"] if d["id"] != nic_id]
    topology["links"] = [x for x in topology["links"] if nic_id not in (x["a"], x["b"])]
