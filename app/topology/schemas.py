"""The ``topology`` payload section (docs/ingest.md) and the read API's answer.

Link types are nvidia-smi's ``topo -m`` codes; the old ``SOC`` is read as ``SYS``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.metrics.plausible import Bound, Number, Timestamp

MAX_DEVICES = 2048
MAX_LINKS = 100_000
MAX_ERRORS = 100

#: Plausible ranges of device fields; outside them a value is stored as null and counted
#: (``topology.devices.<field>``).
DEVICE_BOUNDS: dict[str, Bound] = {
    "numa_node": Bound(0, 1023, integer=True),
    "pcie_gen_current": Bound(1, 8, integer=True),
    "pcie_gen_max": Bound(1, 8, integer=True),
    "pcie_width_current": Bound(1, 64, integer=True),
    "pcie_width_max": Bound(1, 64, integer=True),
}

DeviceId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,32}$")]


class TopologyDeviceIn(BaseModel):
    """A device of the matrix: a GPU (``GPU0`` …) or a NIC (``NIC0`` …), with its PCI address,
    NUMA node, CPU affinity and PCIe link."""

    model_config = ConfigDict(extra="ignore")

    id: DeviceId
    kind: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,15}$")]
    name: Annotated[str, Field(max_length=64)] | None = None
    gpu_uuid: Annotated[str, Field(max_length=96)] | None = None
    pci_bus_id: Annotated[str, Field(max_length=32)] | None = None
    numa_node: Number | None = None
    cpu_affinity: Annotated[str, Field(max_length=256)] | None = None
    link_layer: Annotated[str, Field(max_length=32)] | None = None
    pcie_gen_current: Number | None = None
    pcie_gen_max: Number | None = None
    pcie_width_current: Number | None = None
    pcie_width_max: Number | None = None


class TopologyLinkIn(BaseModel):
    """The connection between devices ``a`` and ``b``: ``NV#``, ``PIX``, ``PXB``, ``PHB``,
    ``NODE`` or ``SYS``."""

    model_config = ConfigDict(extra="ignore")

    a: DeviceId
    b: DeviceId
    type: Annotated[str, Field(pattern=r"^(NV[0-9]{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")]

    @field_validator("type")
    @classmethod
    def _soc_is_sys(cls, value: str) -> str:
        return "SYS" if value == "SOC" else value


class TopologyIn(BaseModel):
    """The node's topology as collected at ``collected_at``; ``partial`` when a device could not
    be read (reasons in ``errors``). Device ids are unique; a link naming no device is dropped
    when stored (see :func:`app.topology.service.topology_document`)."""

    model_config = ConfigDict(extra="ignore")

    collected_at: Timestamp
    source: Annotated[str, Field(max_length=32)] | None = None
    partial: Annotated[bool, Field(strict=True)] = False
    errors: Annotated[list[str], Field(max_length=MAX_ERRORS)] = Field(default_factory=list)
    devices: Annotated[list[TopologyDeviceIn], Field(max_length=MAX_DEVICES)] = Field(
        default_factory=list
    )
    links: Annotated[list[TopologyLinkIn], Field(max_length=MAX_LINKS)] = Field(
        default_factory=list
    )

    @field_validator("errors")
    @classmethod
    def _cut_errors(cls, value: list[str]) -> list[str]:
        return [text[:1024] for text in value]

    @model_validator(mode="after")
    def _device_ids_are_unique(self) -> TopologyIn:
        seen: set[str] = set()
        for index, device in enumerate(self.devices):
            if device.id in seen:
                raise ValueError(f"devices[{index}].id: {device.id!r} is used twice")
            seen.add(device.id)
        return self


class TopologyChangeOut(BaseModel):
    """One change: when the node's topology became the snapshot with ``digest``. ``document`` is
    the snapshot itself, included with ``?history=1``."""

    received_at: datetime
    collected_at: datetime
    digest: str
    partial: bool
    source: str | None
    document: dict[str, Any] | None = None


class TopologySnapshotOut(BaseModel):
    """The node's current topology: the snapshot of its latest change."""

    received_at: datetime
    collected_at: datetime
    first_received_at: datetime
    digest: str
    partial: bool
    source: str | None
    document: dict[str, Any]


class TopologyOut(BaseModel):
    """``GET /api/v1/nodes/{hostname}/topology``: the current snapshot (null before the node
    first sends one) and the changes, newest first."""

    hostname: str
    latest: TopologySnapshotOut | None
    changes: list[TopologyChangeOut]
