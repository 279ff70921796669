"""Coordinates for a topology graph (a pure function): a layered tree per NUMA node.

Rows from the top: CPUs (NUMA nodes), upstream PCIe switches, PCIe switches, GPUs and NICs, and
the NVSwitch fabric below the GPUs. Each device takes one column slot; a parent is centred over
its children; NUMA nodes sit side by side with a gap. Direct NVLinks are arcs under the device
row, deeper the further apart their GPUs are. All sizes are SVG user units (px).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.topology.graph_model import GraphEdge, GraphNode, TopologyGraph

MARGIN = 20.0
SLOT = 100.0
GROUP_GAP = 40.0
ROW_Y = {0: 20.0, 1: 110.0, 2: 200.0, 3: 290.0}
SIZE = {
    "cpu": (124.0, 48.0),
    "pcie_switch": (100.0, 36.0),
    "gpu": (84.0, 48.0),
    "nic": (84.0, 48.0),
}
ARC_BASE = 26.0
ARC_PER_SLOT = 16.0
FABRIC_GAP = 90.0
FABRIC_H = 40.0


def place(graph: TopologyGraph) -> None:
    """Set every node's ``x, y, w, h``, every edge's ``path`` and label point, and the graph's
    ``width`` and ``height``; an empty graph gets zero size."""
    nodes = {n.id: n for n in graph.nodes}
    if not nodes:
        return
    centre: dict[str, float] = {}
    cursor = MARGIN

    def visit(node_id: str) -> float:
        nonlocal cursor
        kids = [k for k in graph.children.get(node_id, []) if k in nodes]
        if kids:
            xs = [visit(k) for k in kids]
            centre[node_id] = (xs[0] + xs[-1]) / 2
        else:
            centre[node_id] = cursor + SLOT / 2
            cursor += SLOT
        return centre[node_id]

    has_parent = {k for kids in graph.children.values() for k in kids}
    roots = [n.id for n in graph.nodes if n.kind == "cpu"]
    roots += [n.id for n in graph.nodes if n.level == 3 and n.id not in has_parent]
    for root in roots:
        visit(root)
        cursor += GROUP_GAP
    bottom = ROW_Y[3] + SIZE["gpu"][1]
    for node in graph.nodes:
        if node.kind == "nvswitch":
            continue
        w, h = SIZE[node.kind]
        node.w, node.h = w, h
        node.x, node.y = centre.get(node.id, MARGIN) - w / 2, ROW_Y[node.level]
    deepest = bottom
    for edge in graph.edges:
        if edge.kind == "nvlink" and edge.b != "nvswitch":
            deepest = max(deepest, _arc(edge, nodes[edge.a], nodes[edge.b]))
    width = max((n.x + n.w for n in graph.nodes if n.kind != "nvswitch"), default=0.0) + MARGIN
    height = deepest + MARGIN
    fabric = nodes.get("nvswitch")
    if fabric is not None:
        linked = [nodes[e.a] for e in graph.edges if e.b == "nvswitch"]
        left = min((n.x for n in linked), default=MARGIN)
        right = max((n.x + n.w for n in linked), default=MARGIN + SLOT)
        fabric.x, fabric.y, fabric.w, fabric.h = left, bottom + FABRIC_GAP, right - left, FABRIC_H
        height = fabric.y + fabric.h + MARGIN
    for edge in graph.edges:
        a, b = nodes[edge.a], nodes[edge.b]
        if edge.kind == "smp":
            _line(edge, a.x + a.w, a.y + a.h / 2, b.x, b.y + b.h / 2, dy=-6)
        elif edge.kind == "pcie":
            _line(edge, a.x + a.w / 2, a.y + a.h, b.x + b.w / 2, b.y, dy=4)
        elif edge.b == "nvswitch":
            x = a.x + a.w / 2
            _line(edge, x, a.y + a.h, x, b.y, dy=0)
            # A longer "down"/"of NV18" label sits lower than its neighbours' "NV18".
            below = 28 if edge.state == "up" else 52
            edge.label_x, edge.label_y, edge.label_anchor = x + 6, a.y + a.h + below, "start"
    graph.width, graph.height = round(width, 1), round(height, 1)


def _line(edge: GraphEdge, x1: float, y1: float, x2: float, y2: float, *, dy: float) -> None:
    edge.path = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
    edge.label_x, edge.label_y = round((x1 + x2) / 2, 1), round((y1 + y2) / 2 + dy, 1)


def _arc(edge: GraphEdge, a: GraphNode, b: GraphNode) -> float:
    """A quadratic curve under the device row from ``a`` to ``b``; returns its lowest y."""
    y = max(a.y + a.h, b.y + b.h)
    x1, x2 = a.x + a.w / 2, b.x + b.w / 2
    control = y + ARC_BASE + ARC_PER_SLOT * abs(x2 - x1) / SLOT
    edge.path = f"M{x1:.1f},{y:.1f} Q{(x1 + x2) / 2:.1f},{control:.1f} {x2:.1f},{y:.1f}"
    apex = (y + control) / 2
    edge.label_x, edge.label_y = round((x1 + x2) / 2, 1), round(apex + 4, 1)
    return apex + 12
