"""A node's topology signature: what its peers in the same fabric should have in common.

Built by a pure function from plain values (the stored topology document, the GPU inventory,
the newest NVLink and NIC-port readings), so :mod:`app.topology.drift` can compare nodes without
a database. Devices are named as an operator reads them: GPUs by ``GPU<index>`` (nvidia-smi's
column), NICs by their device name (``mlx5_0``), since ``NIC<n>`` numbering shifts when a NIC is
missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from app.series.writes import natural_key

#: Node labels naming the fabric a node belongs to, in order of preference.
FABRIC_LABELS = ("ib_pod", "pod", "rack", "cluster")
UNGROUPED = "ungrouped"


@dataclass(frozen=True)
class GpuFacts:
    """One GPU of the inventory: ``index``, ``name`` (``nvmlDeviceGetName``), ``state`` (``ok``,
    ``lost``, ``missing`` …) and its newest PCIe link readings
    (``nvmlDeviceGetCurrPcieLinkGeneration`` / ``…MaxPcieLinkGeneration`` / ``…Width``), None when
    not reported."""

    index: int
    name: str | None
    state: str = "ok"
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None


@dataclass(frozen=True)
class NodeSignature:
    """What a node's fabric peers are compared on.

    ``links`` maps a device pair (sorted names, e.g. ``("GPU3", "GPU5")`` or ``("GPU0",
    "mlx5_0")``) to its ``topo -m`` code; ``gpus`` and ``nics`` are the devices present;
    ``gpu_numa`` the NUMA node of each GPU; ``nvlinks_up`` the NVLinks whose state is ``up`` per
    GPU (only GPUs that report NVLinks); ``nic_states`` the worst port state per NIC
    (``ACTIVE`` when every port is); ``pcie`` per GPU (gen, max gen, width, max width).
    ``partial`` and ``errors`` are those of the topology document.
    """

    hostname: str
    fabric: str
    gpu_model: str | None
    gpu_count: int
    partial: bool = False
    errors: tuple[str, ...] = ()
    gpus: frozenset[str] = frozenset()
    nics: frozenset[str] = frozenset()
    links: Mapping[tuple[str, str], str] = field(default_factory=dict)
    gpu_numa: Mapping[str, int | None] = field(default_factory=dict)
    nvlinks_up: Mapping[str, int] = field(default_factory=dict)
    nic_states: Mapping[str, str] = field(default_factory=dict)
    pcie: Mapping[str, tuple[int | None, int | None, int | None, int | None]] = field(
        default_factory=dict
    )

    @property
    def count_class(self) -> int:
        """The GPU count rounded up to a power of two (7 → 8): a node that lost one GPU of eight
        is still compared with its eight-GPU peers."""
        count = max(self.gpu_count, 1)
        return 1 << (count - 1).bit_length()

    @property
    def group(self) -> str:
        """The comparison group: fabric, GPU count class and model, e.g.
        ``"ib_pod=pod-01 · 8× NVIDIA A100-SXM4-80GB"``."""
        return f"{self.fabric} · {self.count_class}× {self.gpu_model or 'unknown GPU'}"


def fabric_of(labels: Mapping[str, Any]) -> str:
    """``key=value`` of the first label in :data:`FABRIC_LABELS` the node has, else
    ``"ungrouped"``."""
    for key in FABRIC_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value:
            return f"{key}={value}"
    return UNGROUPED


@lru_cache(maxsize=65536)
def pair(a: str, b: str) -> tuple[str, str]:
    """The key of an unordered device pair, in natural order (``GPU2`` before ``GPU10``)."""
    return (a, b) if natural_key(a) <= natural_key(b) else (b, a)


def _device_name(device: Mapping[str, Any]) -> str:
    if device.get("kind") == "nic":
        return str(device.get("name") or device.get("id"))
    return str(device.get("id"))


def build_signature(
    hostname: str,
    *,
    labels: Mapping[str, Any],
    document: Mapping[str, Any],
    gpus: Iterable[GpuFacts] = (),
    nvlinks_up: Mapping[int, int] | None = None,
    nic_port_states: Mapping[str, Iterable[str | None]] | None = None,
) -> NodeSignature:
    """The signature of a node from its stored topology ``document`` (docs/ingest.md
    ``topology``), its GPU inventory, ``nvlinks_up`` (GPU index → NVLinks ``up``, from the newest
    NVLink readings) and ``nic_port_states`` (NIC device → sysfs ``state`` of each port).

    A GPU is present when the topology lists it and the inventory does not mark it lost or
    missing; a NIC when the topology or the port readings name it. The model is the inventory's
    most common GPU name; the count the larger of inventory and topology GPU counts. PCIe comes
    from the inventory's newest readings, else from the topology device's ``pcie_*`` fields.
    """
    inventory = list(gpus)
    devices = [d for d in document.get("devices", []) if isinstance(d, Mapping)]
    names = {str(d.get("id")): _device_name(d) for d in devices}
    gone = {f"GPU{g.index}" for g in inventory if g.state not in ("ok",)}
    topo_gpus = {names[str(d["id"])] for d in devices if d.get("kind") == "gpu"}
    present_gpus = frozenset(topo_gpus - gone)
    states = {nic: _worst_state(list(values)) for nic, values in (nic_port_states or {}).items()}
    nics = frozenset({_device_name(d) for d in devices if d.get("kind") == "nic"} | set(states))
    links: dict[tuple[str, str], str] = {}
    for link in document.get("links", []):
        a, b = names.get(str(link.get("a"))), names.get(str(link.get("b")))
        if a and b and a != b and a not in gone and b not in gone:
            links[pair(a, b)] = str(link.get("type"))
    numa = {
        names[str(d["id"])]: d.get("numa_node")
        for d in devices
        if d.get("kind") == "gpu" and names[str(d["id"])] in present_gpus
    }
    pcie = {
        f"GPU{g.index}": (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max)
        for g in inventory
        if g.state == "ok"
    }
    for d in devices:
        name = names[str(d["id"])]
        if d.get("kind") == "gpu" and name in present_gpus and not any(pcie.get(name, ())):
            pcie[name] = (
                d.get("pcie_gen_current"),
                d.get("pcie_gen_max"),
                d.get("pcie_width_current"),
                d.get("pcie_width_max"),
            )
    models = Counter(g.name for g in inventory if g.name)
    return NodeSignature(
        hostname=hostname,
        fabric=fabric_of(labels),
        gpu_model=models.most_common(1)[0][0] if models else None,
        gpu_count=max(len(inventory), len(topo_gpus)),
        partial=bool(document.get("partial")),
        errors=tuple(str(e) for e in document.get("errors", [])),
        gpus=present_gpus,
        nics=nics,
        links=links,
        gpu_numa=numa,
        nvlinks_up={f"GPU{i}": n for i, n in (nvlinks_up or {}).items()},
        nic_states=states,
        pcie=pcie,
    )


def _worst_state(values: list[str | None]) -> str:
    words = [(v or "unknown").upper() for v in values]
    down = [w for w in words if w != "ACTIVE"]
    return sorted(down)[0] if down else "ACTIVE"
