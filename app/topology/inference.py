"""Reading a stored topology document defensively, and the grouping helpers the graph uses.

A stored document was validated at ingest (app.topology.schemas), but a page must still draw an
older or hand-edited one: whatever cannot be read is skipped with a warning, never raised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.series.writes import natural_key

_CODE = re.compile(r"^(NV[0-9]{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")
_GPU = re.compile(r"^GPU(\d+)$")
_KINDS = {"gpu": 0, "nic": 1}


@dataclass(frozen=True)
class Device:
    """A GPU or NIC of the document: ``numa_node`` (NUMA Affinity), ``cpu_affinity`` (CPU
    Affinity), ``gpu_index`` from the ``GPU<n>`` id."""

    id: str
    kind: str
    name: str | None
    pci_bus_id: str | None
    numa_node: int | None
    cpu_affinity: str | None
    gpu_index: int | None


class UnionFind:
    """Disjoint sets over ``items``; :meth:`groups` keeps the items' first-seen order."""

    def __init__(self, items: Iterable[str]) -> None:
        self._parent = {item: item for item in items}

    def find(self, item: str) -> str:
        """The representative of ``item``'s set."""
        while self._parent[item] != item:
            self._parent[item] = self._parent[self._parent[item]]
            item = self._parent[item]
        return item

    def union(self, a: str, b: str) -> None:
        """Join the sets of ``a`` and ``b``."""
        self._parent[self.find(b)] = self.find(a)

    def groups(self) -> list[list[str]]:
        """The sets, each in insertion order, ordered by their first item."""
        out: dict[str, list[str]] = {}
        for item in self._parent:
            out.setdefault(self.find(item), []).append(item)
        return list(out.values())


def _text(value: Any, limit: int = 256) -> str | None:
    return value.strip()[:limit] or None if isinstance(value, str) else None


def read_devices(document: dict[str, Any], warnings: list[str]) -> list[Device]:
    """The GPUs then NICs of ``document["devices"]``, each in natural id order; entries without
    a string id, repeated ids and other kinds are skipped with a warning."""
    raw = document.get("devices")
    if not isinstance(raw, list):
        warnings.append("the topology lists no devices")
        return []
    seen: set[str] = set()
    devices = []
    for number, entry in enumerate(raw):
        device_id = _text(entry.get("id"), 32) if isinstance(entry, dict) else None
        if device_id is None or not isinstance(entry, dict):
            warnings.append(f"devices[{number}] has no id: not drawn")
            continue
        if device_id in seen:
            warnings.append(f"{device_id} is listed twice: drawn once")
            continue
        kind = entry.get("kind")
        if kind not in _KINDS:
            warnings.append(f"{device_id} is of kind {str(kind)[:32]!r}: not drawn")
            continue
        seen.add(device_id)
        numa = entry.get("numa_node")
        index = _GPU.match(device_id) if kind == "gpu" else None
        devices.append(
            Device(
                id=device_id,
                kind=kind,
                name=_text(entry.get("name"), 64),
                pci_bus_id=_text(entry.get("pci_bus_id"), 32),
                numa_node=numa
                if isinstance(numa, int) and not isinstance(numa, bool) and numa >= 0
                else None,
                cpu_affinity=_text(entry.get("cpu_affinity")),
                gpu_index=int(index[1]) if index else None,
            )
        )
    devices.sort(key=lambda d: (_KINDS[d.kind], natural_key(d.id)))
    return devices


def read_links(
    document: dict[str, Any], known: set[str], warnings: list[str]
) -> dict[frozenset[str], str]:
    """Link code per device pair (``SOC`` read as ``SYS``); links naming an unknown device or
    carrying an unknown code are counted in one warning each."""
    raw = document.get("links")
    pairs: dict[frozenset[str], str] = {}
    if not isinstance(raw, list):
        if raw is not None:
            warnings.append("the topology's links are not a list: none drawn")
        return pairs
    unknown_device = bad_code = 0
    for entry in raw:
        if not isinstance(entry, dict):
            bad_code += 1
            continue
        a, b, code = entry.get("a"), entry.get("b"), entry.get("type")
        if not (isinstance(a, str) and isinstance(b, str) and a in known and b in known and a != b):
            unknown_device += 1
        elif not isinstance(code, str) or not _CODE.match(code):
            bad_code += 1
        else:
            pairs[frozenset((a, b))] = "SYS" if code == "SOC" else code
    if unknown_device:
        warnings.append(f"{unknown_device} link(s) name a device that is not drawn")
    if bad_code:
        warnings.append(f"{bad_code} link(s) carry no nvidia-smi link code")
    return pairs


def group_key(devices: list[Device], reach: UnionFind) -> dict[str, tuple[Any, ...]]:
    """The NUMA group of each device: ``("numa", n)`` from its NUMA affinity, else
    ``("cpus", affinity)``, else the group of the first placed device it reaches without
    ``SYS`` (``reach``), else ``("other", representative)`` — a NUMA node without GPUs."""
    own: dict[str, tuple[Any, ...] | None] = {}
    for device in devices:
        if device.numa_node is not None:
            own[device.id] = ("numa", device.numa_node)
        elif device.cpu_affinity:
            own[device.id] = ("cpus", device.cpu_affinity)
        else:
            own[device.id] = None
    first: dict[str, tuple[Any, ...]] = {}
    for device in devices:
        key = own[device.id]
        if key is not None:
            first.setdefault(reach.find(device.id), key)
    keys: dict[str, tuple[Any, ...]] = {}
    for device in devices:
        root = reach.find(device.id)
        keys[device.id] = own[device.id] or first.get(root) or ("other", root)
    return keys
