"""Response models of ``GET /api/v1/nodes/{hostname}/gpus/{gpu}``."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.events.models import NodeEvent
from app.fleet.schemas import GpuOut
from app.health.rules import State, xid_text
from app.health.schemas import GpuHealthOut, ReasonOut
from app.nvlinks.schemas import NvlinkOut


class GpuEventOut(BaseModel):
    """One event of the GPU (an Xid, a lost GPU …) with the Xid's catalog meaning."""

    occurred_at: datetime
    kind: str
    xid: int | None
    xid_meaning: str | None = Field(description="NVIDIA Xid catalog meaning; null if not listed")
    pci_bus_id: str | None
    message: str | None

    @classmethod
    def from_row(cls, row: NodeEvent) -> GpuEventOut:
        """Build from a stored :class:`~app.events.models.NodeEvent`."""
        return cls(
            occurred_at=row.occurred_at,
            kind=row.kind,
            xid=row.xid,
            xid_meaning=(xid_text(row.xid) or None) if row.xid is not None else None,
            pci_bus_id=row.pci_bus_id,
            message=row.message,
        )


class GpuDetailOut(BaseModel):
    """One GPU: identity and latest values (``gpu``), its health with reasons (plus the node's
    own Unknown reason when the node is stale), the newest reading of each NVLink, and its events
    in ``[start, end]`` newest first."""

    hostname: str
    node_freshness: Literal["fresh", "stale", "never_seen"]
    driver_version: str | None = Field(description="the node's NVIDIA driver (nvidia-smi)")
    cuda_version: str | None
    gpu: GpuOut
    health: GpuHealthOut
    node_state: State
    node_reasons: list[ReasonOut] = Field(description="reasons of the node not tied to a GPU")
    nvlinks: list[NvlinkOut]
    start: datetime
    end: datetime
    events: list[GpuEventOut]
