"""NVLink edges of the topology graph: one NVSwitch fabric node or direct GPU–GPU edges, with
the links the NVLink readings report down (see :mod:`app.topology.graph` for the heuristic)."""

from __future__ import annotations

import re
from typing import Any

from app.series.writes import natural_key
from app.topology.graph_model import GraphEdge, GraphNode, NvlinkState, TopologyGraph
from app.topology.inference import Device

MAX_NVLINKS_PER_GPU = 18
_NV = re.compile(r"^NV(\d{1,3})$")
_BUS = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


def _bus_key(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """``00000000:18:00.0`` and ``0000:18:00.0`` → the same (domain, bus, device, function)."""
    match = _BUS.match((bus_id or "").strip().lower())
    if not match:
        return None
    domain, bus, dev, fn = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16), int(fn)


def add_nvlinks(
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
    switched = [s for s in nvlinks if s.remote_device_type == "nvswitch"]
    switches = {_bus_key(s.remote_pci_bus_id) or s.remote_pci_bus_id for s in switched} - {None}
    for state in nvlinks:
        if state.state == "down":
            down.setdefault(f"GPU{state.gpu_index}", []).append(state)
    heaviest = max(counts, key=lambda g: sum(counts[g].values()), default=None)
    if switched:
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
    plural = "NVSwitch" if switch_count == 1 else "NVSwitches"
    detail = f"{switch_count} {plural}" if switch_count else "NVLink fabric"
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
