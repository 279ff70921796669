"""The topology graph's data: nodes, edges and NVLink states (see :mod:`app.topology.graph`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NvlinkState:
    """One GPU link's newest reading (:mod:`app.series.readings`): ``state`` is ``up``,
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
    host_bridges: int | None = None
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
    label_anchor: str = "middle"


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

    def name(self, node_id: str) -> str:
        """What a reader calls node ``node_id`` (its label, e.g. ``NUMA 0``), else the id."""
        return next((n.label for n in self.nodes if n.id == node_id), node_id)

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
