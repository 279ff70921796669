"""The drawn graph of a node: CPUs (NUMA nodes), PCIe switches, GPUs, NICs and NVSwitches, built
from a stored topology document (``nvidia-smi topo -m`` codes, docs/ingest.md) and the newest
reading of the node's NVLinks. A pure function; :mod:`app.topology.layout` adds coordinates.

Inference follows the legend nvidia-smi prints under ``topo -m``:

- ``PIX`` (at most a single PCIe bridge): the devices sit behind one PCIe switch, drawn as a
  switch node with a ``PIX`` edge to each of them.
- ``PXB`` (multiple bridges, not through the host bridge): switches (or devices) joined by
  ``PXB`` hang below one upstream switch tree, drawn as an upstream ``PCIe switches`` node with a
  ``PXB`` edge to each.
- ``PHB`` (through a PCIe host bridge, typically the CPU) and ``NODE`` (between host bridges of
  one NUMA node): the same NUMA node. Each top-level PCIe unit has a ``PHB`` edge to its CPU node;
  the CPU node counts its host bridges (units joined by ``PHB`` share one, ``NODE`` separates them).
- ``SYS`` (the SMP interconnect between NUMA nodes, QPI/UPI/xGMI; ``SOC`` in old drivers):
  different NUMA nodes, drawn as ``SYS`` edges between neighbouring CPU nodes.

Placement: a device sits under the NUMA node of its ``numa_node`` (NUMA Affinity column), else of
its ``cpu_affinity`` (CPU Affinity column), else of a device it reaches without ``SYS`` (NICs have
no affinity columns in ``topo -m``). A device ``SYS`` to every placed device is on a NUMA node
without GPUs, drawn as ``NUMA ?``.

NVSwitch heuristic: a GPU has at most 18 NVLinks (H100/B200; A100 has 12, V100 6). When one GPU's
NVLink counts summed over its peers exceed that (eight H100s at ``NV18`` each: 7 × 18 = 126), the
links cannot be direct cables; every pair sees all of both GPUs' links, which only NVSwitches
give. Such a system (or one whose NVLink section names an NVSwitch as a link's remote end) is
drawn as each GPU connected to one NVSwitch fabric node by ``NV<its links>``, not as a full mesh.
A 4-GPU board with direct ``NV4`` pairs (3 × 4 = 12) stays a mesh of direct edges.

NVLink state comes from the node's NVLink readings (``nvmlDeviceGetNvLinkState``): a GPU with a
link ``down`` makes its fabric edge (or the direct edge to the GPU whose PCI bus id is the link's
remote end) ``down``; a GPU whose pairs show fewer links than the others (``NV17`` among
``NV18``) is ``degraded``. The fabric node counts the distinct NVSwitch PCI bus ids named as
remote ends (4 on HGX H100).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from app.topology import layout
from app.topology.graph_model import GraphEdge, GraphNode, NvlinkState, TopologyGraph
from app.topology.graph_nvlink import MAX_NVLINKS_PER_GPU, add_nvlinks
from app.topology.inference import Device, UnionFind, group_key, read_devices, read_links

__all__ = [
    "MAX_NVLINKS_PER_GPU",
    "GraphEdge",
    "GraphNode",
    "NvlinkState",
    "TopologyGraph",
    "build_graph",
]

_GROUP_RANK = {"numa": 0, "cpus": 1, "other": 2}
PCIE_CODES = frozenset({"PIX", "PXB", "PHB", "NODE"})


def build_graph(
    document: Any,
    nvlinks: Iterable[NvlinkState] = (),
    *,
    known_gpu_indexes: Sequence[int] = (),
) -> TopologyGraph:
    """The graph of ``document`` (a stored topology document; any shape is accepted, what cannot
    be read becomes a warning) with the NVLink states ``nvlinks`` applied; GPUs of
    ``known_gpu_indexes`` absent from the document are drawn as ``missing``. Never raises."""
    graph = TopologyGraph()
    doc = document if isinstance(document, dict) else {}
    if not isinstance(document, dict):
        graph.warnings.append("the stored topology is not a JSON object")
    graph.partial = doc.get("partial") is True
    raw_errors = doc.get("errors")
    graph.errors = [str(e) for e in raw_errors if e] if isinstance(raw_errors, list) else []
    devices = read_devices(doc, graph.warnings)
    pairs = read_links(doc, {d.id for d in devices}, graph.warnings)
    _check_missing_pairs(devices, pairs, graph.warnings)
    _place_pcie(graph, devices, pairs)
    _add_missing_gpus(graph, devices, known_gpu_indexes)
    add_nvlinks(graph, devices, pairs, list(nvlinks))
    layout.place(graph)
    return graph


def _check_missing_pairs(
    devices: list[Device], pairs: dict[frozenset[str], str], warnings: list[str]
) -> None:
    # ``pairs`` holds only distinct pairs of drawn devices (see read_links).
    missing = len(devices) * (len(devices) - 1) // 2 - len(pairs)
    if missing:
        warnings.append(f"{missing} device pair(s) have no link code: their connection is unknown")


def _place_pcie(
    graph: TopologyGraph, devices: list[Device], pairs: dict[frozenset[str], str]
) -> None:
    """CPU nodes per NUMA group, PCIe switches from PIX/PXB, devices under them, SYS between."""
    reach = UnionFind([d.id for d in devices])
    for pair, code in pairs.items():
        if code in PCIE_CODES:
            reach.union(*sorted(pair))
    keys = group_key(devices, reach)
    order: list[tuple[Any, ...]] = []
    for device in devices:
        if keys[device.id] not in order:
            order.append(keys[device.id])
    order.sort(key=lambda k: (_GROUP_RANK[k[0]], k[1] if k[0] == "numa" else 0))
    within: dict[tuple[Any, ...], list[tuple[str, str, str]]] = {k: [] for k in order}
    for pair, code in pairs.items():
        a, b = sorted(pair)
        if keys[a] == keys[b]:
            within[keys[a]].append((a, b, code))
    switches = 0
    cpu_ids = [f"cpu-{number}" for number in range(len(order))]
    for cpu_id, key in zip(cpu_ids, order, strict=True):
        members = [d for d in devices if keys[d.id] == key]
        switches = _place_group(graph, cpu_id, key, members, within[key], switches)
    for left, right in itertools.pairwise(cpu_ids):
        graph.edges.append(GraphEdge(left, right, "smp", "SYS", "SYS"))


def _place_group(
    graph: TopologyGraph,
    cpu_id: str,
    key: tuple[Any, ...],
    members: list[Device],
    links: list[tuple[str, str, str]],
    switches: int,
) -> int:
    """One NUMA node's tree: PIX switches, PXB upstream switches, PHB edges to the CPU node;
    ``links`` are the codes between its members. Returns the switch count so far."""
    ids = [d.id for d in members]
    leaf = UnionFind(ids)
    for a, b, code in links:
        if code == "PIX":
            leaf.union(a, b)
    unit_of: dict[str, str] = {}
    units = []
    for group in leaf.groups():
        unit = group[0]
        if len(group) > 1:
            switches += 1
            unit = f"pcie-{switches}"
            graph.nodes.append(_switch(unit, cpu_id, 2, "PIX: one PCIe switch"))
            graph.children[unit] = group
            graph.edges += [GraphEdge(unit, m, "pcie", "PIX", "PIX") for m in group]
        units.append(unit)
        unit_of.update({m: unit for m in group})
    upstream = UnionFind(units)
    for a, b, code in links:
        if code == "PXB" and unit_of[a] != unit_of[b]:
            upstream.union(unit_of[a], unit_of[b])
    top_of: dict[str, str] = {}
    top = []
    for group in upstream.groups():
        unit = group[0]
        if len(group) > 1:
            switches += 1
            unit = f"pcie-{switches}"
            graph.nodes.append(_switch(unit, cpu_id, 1, "PXB: several PCIe bridges"))
            graph.children[unit] = group
            graph.edges += [GraphEdge(unit, u, "pcie", "PXB", "PXB") for u in group]
        top.append(unit)
        top_of.update({u: unit for u in group})
    device_top = {d: top_of[unit_of[d]] for d in ids}
    graph.children[cpu_id] = top
    graph.edges += [GraphEdge(cpu_id, t, "pcie", "PHB", "PHB") for t in top]
    graph.nodes.append(_cpu(cpu_id, key, members, _host_bridges(top, device_top, links)))
    graph.nodes += [_device_node(device, cpu_id) for device in members]
    return switches


def _host_bridges(
    top: list[str], device_top: dict[str, str], links: list[tuple[str, str, str]]
) -> int | None:
    """PCIe host bridges under one CPU: top-level units joined by ``PHB`` share one, ``NODE``
    separates them. None when a pair of devices under different units has no PCIe code
    (``NV#`` hides the PCIe path, or the pair is missing)."""
    sizes = Counter(device_top.values())
    count = len(device_top)
    cross = count * (count - 1) // 2 - sum(n * (n - 1) // 2 for n in sizes.values())
    bridges = UnionFind(top)
    seen = 0
    for a, b, code in links:
        if device_top[a] == device_top[b]:
            continue
        if code not in PCIE_CODES:
            return None
        seen += 1
        if code == "PHB":
            bridges.union(device_top[a], device_top[b])
    return len(bridges.groups()) if seen == cross else None


def _switch(node_id: str, group: str, level: int, title: str) -> GraphNode:
    label = "PCIe switch" if level == 2 else "PCIe switches"
    return GraphNode(node_id, "pcie_switch", label, level, group=group, title=title)


def _cpu(
    node_id: str, key: tuple[Any, ...], members: list[Device], bridges: int | None
) -> GraphNode:
    affinities = sorted({d.cpu_affinity for d in members if d.cpu_affinity})
    cpus = f"CPUs {affinities[0]}" if len(affinities) == 1 else ""
    if key[0] == "numa":
        label, detail = f"NUMA {key[1]}", cpus
    elif key[0] == "cpus":
        label, detail = "CPU", cpus or "NUMA node not reported"
    elif any(d.kind == "gpu" for d in members):
        label, detail = "CPU ?", "affinity not reported"
    else:
        label, detail = "NUMA ?", "no GPU here (SYS to all)"
    hosts = "PCIe host bridges not known" if bridges is None else f"{bridges} PCIe host bridge(s)"
    title = f"{label}: {detail or 'CPUs not reported'}; {hosts}"
    return GraphNode(
        node_id, "cpu", label, 0, detail=detail, group=node_id, title=title, host_bridges=bridges
    )


def _device_node(device: Device, group: str) -> GraphNode:
    if device.kind == "gpu":
        detail = f"NUMA {device.numa_node}" if device.numa_node is not None else ""
    else:
        detail = device.name or ""
    title = " · ".join(
        p
        for p in (
            device.id,
            device.name,
            device.pci_bus_id,
            device.cpu_affinity and f"CPUs {device.cpu_affinity}",
        )
        if p
    )
    return GraphNode(
        device.id,
        device.kind,
        device.id,
        3,
        detail=detail,
        group=group,
        gpu_index=device.gpu_index,
        title=title,
    )


def _add_missing_gpus(graph: TopologyGraph, devices: list[Device], known: Sequence[int]) -> None:
    present = {d.gpu_index for d in devices if d.gpu_index is not None}
    for index in sorted(set(known) - present):
        graph.nodes.append(
            GraphNode(
                f"GPU{index}",
                "gpu",
                f"GPU{index}",
                3,
                detail="not in topology",
                gpu_index=index,
                state="missing",
                title=f"GPU{index} is known to the server but absent from this topology",
            )
        )
        graph.warnings.append(f"GPU{index} is not in the topology: drawn apart, unconnected")
