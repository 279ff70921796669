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
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.timeseries import natural_key
from app.topology import layout
from app.topology.inference import Device, UnionFind, group_key, read_devices, read_links

MAX_NVLINKS_PER_GPU = 18
_GROUP_RANK = {"numa": 0, "cpus": 1, "other": 2}
PCIE_CODES = frozenset({"PIX", "PXB", "PHB", "NODE"})
_NV = re.compile(r"^NV(\d{1,3})$")
_BUS = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


@dataclass(frozen=True)
class NvlinkState:
    """One GPU link's newest reading (app.nvlinks ``nvlink_sample``): ``state`` is ``up``,
    ``down`` or ``unknown`` (``nvmlDeviceGetNvLinkState``); the remote end from
    ``nvmlDeviceGetNvLinkRemotePciInfo`` / ``…RemoteDeviceType``."""

    gpu_index: int
    link: int
    state: str
    remote_device_type: str | None = None
    remote_pci_bus_id: str | None = None


@dataclass
class GraphNode:
    """A box of the drawing. ``kind``: ``cpu``, ``pcie_switch``, ``gpu``, ``nic``, ``nvswitch``;
    ``level`` its row (0 CPU, 1 upstream switch, 2 switch, 3 device, 4 NVSwitch); ``state``
    ``ok``, ``down`` (an NVLink down) or ``missing`` (a GPU absent from the topology).
    Coordinates (px, top-left corner) are set by :func:`app.topology.layout.place`."""

    id: str
    kind: str
    label: str
    level: int
    detail: str = ""
    group: str = ""
    gpu_index: int | None = None
    state: str = "ok"
    title: str = ""
    down_links: list[int] = field(default_factory=list)
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


@dataclass
class GraphEdge:
    """A line between nodes ``a`` and ``b``. ``kind``: ``pcie``, ``smp`` or ``nvlink``; ``code``
    the nvidia-smi code of the hop (``PIX``, ``PXB``, ``PHB``, ``SYS``, ``NV18``); ``label`` what
    is written on it; ``state`` ``up``, ``degraded`` (fewer NVLinks than the other GPUs) or
    ``down`` (the NVLink section reports a link down). ``path`` is SVG path data."""

    a: str
    b: str
    kind: str
    code: str
    label: str
    state: str = "up"
    down: dict[str, set[int]] = field(default_factory=dict)
    path: str = ""
    label_x: float = 0.0
    label_y: float = 0.0


@dataclass
class TopologyGraph:
    """Nodes and edges with coordinates, plus what could not be drawn (``warnings``), the
    document's own ``partial`` flag and ``errors``, and why it is drawn as an NVSwitch system."""

    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    children: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    partial: bool = False
    errors: list[str] = field(default_factory=list)
    nvswitch_reason: str | None = None
    width: float = 0.0
    height: float = 0.0

    def count(self, kind: str) -> int:
        """How many nodes of ``kind``."""
        return sum(1 for n in self.nodes if n.kind == kind)

    def node(self, node_id: str) -> GraphNode:
        """The node ``node_id``. Raises KeyError when absent."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def edge(self, a: str, b: str) -> GraphEdge:
        """The edge between ``a`` and ``b`` (either order). Raises KeyError when absent."""
        for edge in self.edges:
            if {edge.a, edge.b} == {a, b}:
                return edge
        raise KeyError((a, b))

    def parent(self, node_id: str) -> str | None:
        """The node one level up in the PCIe tree (None for CPU nodes and unplaced nodes)."""
        return next((p for p, kids in self.children.items() if node_id in kids), None)

    def cpu_of(self, node_id: str) -> str | None:
        """The CPU (NUMA node) ``node_id`` hangs under, or None."""
        current: str | None = node_id
        while current is not None and not current.startswith("cpu-"):
            current = self.parent(current)
        return current


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
    _add_nvlinks(graph, devices, pairs, list(nvlinks))
    layout.place(graph)
    return graph


def _check_missing_pairs(
    devices: list[Device], pairs: dict[frozenset[str], str], warnings: list[str]
) -> None:
    missing = sum(
        1
        for i, a in enumerate(devices)
        for b in devices[i + 1 :]
        if frozenset((a.id, b.id)) not in pairs
    )
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
    switch_count = 0
    cpu_ids = []
    for number, key in enumerate(order):
        members = [d for d in devices if keys[d.id] == key]
        cpu_id = f"cpu-{number}"
        cpu_ids.append(cpu_id)
        leaf = UnionFind([d.id for d in members])
        for a in members:
            for b in members:
                if a.id < b.id and pairs.get(frozenset((a.id, b.id))) == "PIX":
                    leaf.union(a.id, b.id)
        units: list[tuple[str, list[str]]] = []
        for group in leaf.groups():
            if len(group) == 1:
                units.append((group[0], group))
                continue
            switch_count += 1
            switch_id = f"pcie-{switch_count}"
            graph.nodes.append(_switch(switch_id, cpu_id, 2, "PIX: one PCIe switch"))
            graph.children[switch_id] = group
            graph.edges += [GraphEdge(switch_id, m, "pcie", "PIX", "PIX") for m in group]
            units.append((switch_id, group))
        upstream = UnionFind([u for u, _ in units])
        for u, u_members in units:
            for v, v_members in units:
                if u < v and any(
                    pairs.get(frozenset((x, y))) == "PXB" for x in u_members for y in v_members
                ):
                    upstream.union(u, v)
        members_of = dict(units)
        top: list[tuple[str, list[str]]] = []
        for group in upstream.groups():
            if len(group) == 1:
                top.append((group[0], members_of[group[0]]))
                continue
            switch_count += 1
            switch_id = f"pcie-{switch_count}"
            graph.nodes.append(_switch(switch_id, cpu_id, 1, "PXB: several PCIe bridges"))
            graph.children[switch_id] = group
            graph.edges += [GraphEdge(switch_id, u, "pcie", "PXB", "PXB") for u in group]
            top.append((switch_id, [m for u in group for m in members_of[u]]))
        bridges = UnionFind([t for t, _ in top])
        for t, t_members in top:
            for s, s_members in top:
                if t < s and any(
                    pairs.get(frozenset((x, y))) == "PHB" for x in t_members for y in s_members
                ):
                    bridges.union(t, s)
        graph.children[cpu_id] = [t for t, _ in top]
        graph.edges += [GraphEdge(cpu_id, t, "pcie", "PHB", "PHB") for t, _ in top]
        graph.nodes.append(_cpu(cpu_id, key, members, len(bridges.groups())))
        for device in members:
            graph.nodes.append(_device_node(device, cpu_id))
    for left, right in itertools.pairwise(cpu_ids):
        graph.edges.append(GraphEdge(left, right, "smp", "SYS", "SYS"))


def _switch(node_id: str, group: str, level: int, title: str) -> GraphNode:
    label = "PCIe switch" if level == 2 else "PCIe switches"
    return GraphNode(node_id, "pcie_switch", label, level, group=group, title=title)


def _cpu(node_id: str, key: tuple[Any, ...], members: list[Device], bridges: int) -> GraphNode:
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
    title = f"{label}: {detail or 'CPUs not reported'}; {bridges} PCIe host bridge(s)"
    return GraphNode(node_id, "cpu", label, 0, detail=detail, group=node_id, title=title)


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


def _bus_key(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """``00000000:18:00.0`` and ``0000:18:00.0`` → the same (domain, bus, device, function)."""
    match = _BUS.match((bus_id or "").strip().lower())
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16), int(fn)


def _add_nvlinks(
    graph: TopologyGraph,
    devices: list[Device],
    pairs: dict[frozenset[str], str],
    nvlinks: list[NvlinkState],
) -> None:
    """NVLink edges: to one NVSwitch fabric node, or GPU to GPU; down links from ``nvlinks``."""
    gpus = {d.gpu_index: d for d in devices if d.kind == "gpu" and d.gpu_index is not None}
    by_bus = {_bus_key(d.pci_bus_id): d.id for d in gpus.values() if _bus_key(d.pci_bus_id)}
    counts: dict[str, dict[str, int]] = {d.id: {} for d in gpus.values()}
    for key, code in pairs.items():
        match = _NV.match(code)
        a, b = sorted(key)
        if match and a in counts and b in counts:
            counts[a][b] = counts[b][a] = int(match[1])
    down: dict[str, list[NvlinkState]] = {}
    switches = {
        _bus_key(s.remote_pci_bus_id) or s.remote_pci_bus_id
        for s in nvlinks
        if s.remote_device_type == "nvswitch"
    }
    for state in nvlinks:
        if state.state == "down":
            down.setdefault(f"GPU{state.gpu_index}", []).append(state)
    heaviest = max(counts, key=lambda g: sum(counts[g].values()), default=None)
    if switches:
        graph.nvswitch_reason = "the NVLink readings name NVSwitches as the links' remote ends"
    elif heaviest is not None and sum(counts[heaviest].values()) > MAX_NVLINKS_PER_GPU:
        total = sum(counts[heaviest].values())
        graph.nvswitch_reason = (
            f"{heaviest} has {total} NVLinks to its peers in all, more than one GPU has "
            f"({MAX_NVLINKS_PER_GPU}): they go through NVSwitches"
        )
    if graph.nvswitch_reason:
        _fabric(graph, counts, down, len(switches))
    else:
        _direct(graph, counts, down, by_bus)


def _fabric(
    graph: TopologyGraph,
    counts: dict[str, dict[str, int]],
    down: dict[str, list[NvlinkState]],
    switch_count: int,
) -> None:
    detail = f"{switch_count} NVSwitches" if switch_count else "NVLink fabric"
    graph.nodes.append(
        GraphNode(
            "nvswitch", "nvswitch", "NVSwitch", 4, detail=detail, title=graph.nvswitch_reason or ""
        )
    )
    links = {g: max(peers.values()) for g, peers in counts.items() if peers}
    best = max(links.values(), default=0)
    for gpu_id in sorted(set(links) | set(down), key=natural_key):
        if gpu_id not in counts:
            continue
        code = f"NV{links[gpu_id]}" if gpu_id in links else "NV?"
        edge = GraphEdge(gpu_id, "nvswitch", "nvlink", code, code)
        if gpu_id in links and links[gpu_id] < best:
            edge.state, edge.label = "degraded", f"{code} of NV{best}"
        _mark_down(graph, edge, gpu_id, down.get(gpu_id, []))
        graph.edges.append(edge)


def _direct(
    graph: TopologyGraph,
    counts: dict[str, dict[str, int]],
    down: dict[str, list[NvlinkState]],
    by_bus: dict[Any, str],
) -> None:
    for gpu_id, peers in sorted(counts.items(), key=lambda item: natural_key(item[0])):
        for other, count in sorted(peers.items(), key=lambda item: natural_key(item[0])):
            if natural_key(gpu_id) < natural_key(other):
                graph.edges.append(GraphEdge(gpu_id, other, "nvlink", f"NV{count}", f"NV{count}"))
    for gpu_id, states in down.items():
        for state in states:
            peer: str | None = by_bus.get(_bus_key(state.remote_pci_bus_id))
            if peer is None and len(counts.get(gpu_id, {})) == 1:
                peer = next(iter(counts[gpu_id]))
            try:
                edge = graph.edge(gpu_id, peer) if peer else None
            except KeyError:
                edge = None
            if edge is None:
                _mark_gpu(graph, gpu_id, [state])
                graph.warnings.append(
                    f"{gpu_id} NVLink {state.link} is down; its remote end is not in the topology"
                )
            else:
                _mark_down(graph, edge, gpu_id, [state])


def _mark_down(
    graph: TopologyGraph, edge: GraphEdge, gpu_id: str, states: list[NvlinkState]
) -> None:
    """Mark ``edge`` down: a link seen down from either end counts once per end's link."""
    if not states:
        return
    edge.down.setdefault(gpu_id, set()).update(s.link for s in states)
    edge.state = "down"
    edge.label = f"{edge.code} · {max(len(v) for v in edge.down.values())} down"
    _mark_gpu(graph, gpu_id, states)


def _mark_gpu(graph: TopologyGraph, gpu_id: str, states: list[NvlinkState]) -> None:
    try:
        node = graph.node(gpu_id)
    except KeyError:
        return
    node.state = "down"
    node.down_links = sorted(set(node.down_links) | {s.link for s in states})
