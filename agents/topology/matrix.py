"""Parsers for ``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p r``.

``topo -m`` prints a header row of device columns (``GPU0 … GPUn``, then ``NIC0 … NICm`` with a
"NIC Legend" mapping ``NIC#`` to ``mlx5_N``; drivers before ~470 name the NIC columns ``mlx5_0``
directly), then ``CPU Affinity``, ``NUMA Affinity`` and (driver 535+) ``GPU NUMA ID``; one row per
device of link codes, and a legend of those codes (``X = Self``, ``NV# = Connection traversing a
bonded set of # NVLinks``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; older drivers print
``SOC`` for ``SYS``). The cells are tab-separated, but captures often have the tabs expanded to
spaces, the header wrapped in ANSI underline escapes, and empty affinity cells (Windows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agents.topology.table import AFFINITY_COLUMNS, parse_table

#: nvidia-smi's old spelling → today's (``SOC`` = "the SMP link between CPU sockets").
CODE_ALIASES = {"SOC": "SYS"}

#: The codes of a ``topo -m`` cell between two devices (the server's link types).
_LINK_CODE = re.compile(r"^(NV[0-9]{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")
#: Unknown codes named in the section's errors, at most.
MAX_CODE_ERRORS = 8
MAX_AFFINITY_CHARS = 256
_INTEGER = re.compile(r"-?[0-9]{1,9}")
_GPU = re.compile(r"^GPU(\d+)$")
_NIC = re.compile(r"^NIC(\d+)$")


class TopoParseError(ValueError):
    """The text is not an nvidia-smi topology matrix; the message quotes what was found."""


@dataclass(frozen=True)
class TopoDevice:
    """One row/column of the matrix. ``id`` is the payload's id (``GPU0``, ``NIC0``); ``label``
    is the column as printed (``NIC0`` or, in old output, ``mlx5_0``); ``name`` the NIC's device
    name (``mlx5_0``) when known. Affinity fields are GPU-only and ``None`` when absent, empty
    or ``N/A``."""

    id: str
    kind: str
    label: str
    index: int
    name: str | None = None
    cpu_affinity: str | None = None
    numa_affinity: int | None = None
    gpu_numa_id: int | None = None


@dataclass(frozen=True)
class TopoMatrix:
    """A parsed ``nvidia-smi topo -m``: devices in printed order and the link codes between them.

    ``raw_codes[i][j]`` is the code as printed in row ``i``, column ``j``; :meth:`code` gives it
    normalised (``SOC`` → ``SYS``)."""

    devices: tuple[TopoDevice, ...]
    raw_codes: tuple[tuple[str, ...], ...]
    affinity_columns: tuple[str, ...] = ()
    legend: dict[str, str] = field(default_factory=dict)
    nic_legend: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[TopoDevice, ...]:
        return tuple(d for d in self.devices if d.kind == "gpu")

    @property
    def nics(self) -> tuple[TopoDevice, ...]:
        return tuple(d for d in self.devices if d.kind == "nic")

    def device(self, key: str) -> TopoDevice:
        """The device whose ``id``, ``label`` or ``name`` is ``key``.

        Raises:
            KeyError: no such device."""
        for device in self.devices:
            if key in (device.id, device.label, device.name):
                return device
        raise KeyError(key)

    def raw_code(self, a: str, b: str) -> str:
        """The code printed in ``a``'s row and ``b``'s column."""
        rows = self.devices
        return self.raw_codes[rows.index(self.device(a))][rows.index(self.device(b))]

    def code(self, a: str, b: str) -> str:
        """The code between ``a`` and ``b``, normalised (``SOC`` → ``SYS``)."""
        raw = self.raw_code(a, b)
        return CODE_ALIASES.get(raw, raw)


@dataclass(frozen=True)
class P2PMatrix:
    """A parsed ``nvidia-smi topo -p2p <r|w|n|a|p>``: ``OK``, ``CNS`` (chipset not supported),
    ``GNS`` (GPU not supported), ``TNS`` (topology not supported), ``NS``, ``U`` (unknown)."""

    gpus: tuple[str, ...]
    codes: tuple[tuple[str, ...], ...]
    legend: dict[str, str] = field(default_factory=dict)

    def status(self, a: str, b: str) -> str:
        """The status printed in ``a``'s row and ``b``'s column."""
        return self.codes[self.gpus.index(a)][self.gpus.index(b)]


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse the output of ``nvidia-smi topo -m``.

    Raises:
        TopoParseError: no matrix header, a device without its row, or a row too short; the
            message quotes the start of the text (e.g. ``ERROR: Option -m is missing its value``).
    """
    table = parse_table(text, TopoParseError)
    devices: list[TopoDevice] = []
    nic_count = 0
    for label in table.labels:
        cells = table.affinity.get(label, {})
        gpu = _GPU.match(label)
        if gpu:
            devices.append(
                TopoDevice(
                    id=label,
                    kind="gpu",
                    label=label,
                    index=int(gpu[1]),
                    cpu_affinity=_affinity(cells.get("CPU Affinity")),
                    numa_affinity=_int(cells.get("NUMA Affinity")),
                    gpu_numa_id=_int(cells.get("GPU NUMA ID")),
                )
            )
            continue
        nic = _NIC.match(label)
        index = int(nic[1]) if nic else nic_count
        name = table.nic_legend.get(label) if nic else label
        devices.append(
            TopoDevice(id=f"NIC{index}", kind="nic", label=label, index=index, name=name)
        )
        nic_count += 1
    if not any(d.kind == "gpu" for d in devices):
        raise TopoParseError(f"topology header has no GPU column: {table.labels!r}")
    return TopoMatrix(
        devices=tuple(devices),
        raw_codes=table.codes,
        affinity_columns=tuple(c for c in AFFINITY_COLUMNS if c in table.columns),
        legend=table.legend,
        nic_legend=table.nic_legend,
    )


def parse_p2p_matrix(text: str) -> P2PMatrix:
    """Parse the output of ``nvidia-smi topo -p2p r`` (or ``w``, ``n``, ``a``, ``p``).

    Raises:
        TopoParseError: not a P2P matrix."""
    table = parse_table(text, TopoParseError)
    return P2PMatrix(gpus=table.labels, codes=table.codes, legend=table.legend)


def topology_section(
    matrix: TopoMatrix, gpu_uuids_by_index: dict[int, str] | None = None
) -> dict[str, Any]:
    """The payload's ``topology`` ``devices`` and ``links`` (docs/ingest.md) from a matrix.

    Links are listed once per pair, in device order (``a`` before ``b``), never for ``X``; codes
    are normalised (``SOC`` → ``SYS``). What ``topo -m`` cannot tell (PCI bus ids, a NIC's NUMA
    node and link layer) is ``None``. ``gpu_numa_id`` is added only where the driver printed one.
    A cell that holds no topology code (a ``topo -p2p`` status such as ``OK``, a cut or garbled
    cell) is left out alone: the section is then ``partial`` with ``errors`` naming the cells.
    """
    uuids = gpu_uuids_by_index or {}
    devices: list[dict[str, Any]] = []
    for device in matrix.devices:
        if device.kind == "gpu":
            entry: dict[str, Any] = {
                "id": device.id,
                "kind": "gpu",
                "gpu_uuid": uuids.get(device.index),
                "pci_bus_id": None,
                "numa_node": device.numa_affinity,
                "cpu_affinity": device.cpu_affinity,
            }
            if device.gpu_numa_id is not None:
                entry["gpu_numa_id"] = device.gpu_numa_id
        else:
            entry = {
                "id": device.id,
                "kind": "nic",
                "name": device.name,
                "pci_bus_id": None,
                "numa_node": None,
                "link_layer": None,
            }
        devices.append(entry)
    links = []
    unknown: list[str] = []
    for i, a in enumerate(matrix.devices):
        for j in range(i + 1, len(matrix.devices)):
            code = matrix.raw_codes[i][j]
            b = matrix.devices[j]
            if _LINK_CODE.match(code):
                links.append({"a": a.id, "b": b.id, "type": CODE_ALIASES.get(code, code)})
            elif code != "X":
                unknown.append(f"{a.id}-{b.id} {code[:16]!r}")
    if not unknown:
        return {"devices": devices, "links": links}
    listed = ", ".join(unknown[:MAX_CODE_ERRORS]) + (" …" if len(unknown) > MAX_CODE_ERRORS else "")
    error = f"nvidia-smi topo -m: {len(unknown)} cell(s) hold no link code, left out: {listed}"
    return {"devices": devices, "links": links, "partial": True, "errors": [error]}


def _text(cell: str | None) -> str | None:
    return cell if cell and cell != "N/A" else None


def _affinity(cell: str | None) -> str | None:
    """A CPU list (``0-51,104-155``); longer than the server takes (256) it is garbled."""
    value = _text(cell)
    return value if value is None or len(value) <= MAX_AFFINITY_CHARS else None


def _int(cell: str | None) -> int | None:
    value = _text(cell)
    # Not str.isdigit(): it says yes to "²" and "٣" (int() refuses the one, reads the other),
    # and lstrip("-") let "--5" through.
    return int(value) if value is not None and _INTEGER.fullmatch(value) else None
