"""NVLink payload entries (``nvlinks`` in docs/ingest.md) and the read API's answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.metrics.plausible import Bound, Number, Timestamp

MAX_NVLINKS = 100_000

#: Plausible ranges; outside them a value is stored as null and counted (``nvlinks.<field>``).
BOUNDS: dict[str, Bound] = {
    "speed_gbps": Bound(0, 1000),
    "tx_bytes_per_s": Bound(0, 1e13),
    "rx_bytes_per_s": Bound(0, 1e13),
    "crc_errors": Bound(0, 1e15, integer=True),
    "replay_errors": Bound(0, 1e15, integer=True),
    "recovery_errors": Bound(0, 1e15, integer=True),
}


class NvlinkIn(BaseModel):
    """One GPU link at one time: state (``nvmlDeviceGetNvLinkState``), speed in GB/s, the remote
    end (``…GetNvLinkRemotePciInfo``, ``…GetNvLinkRemoteDeviceType``), throughput and the
    cumulative error counters (``…GetNvLinkErrorCounter``: CRC_FLIT, REPLAY, RECOVERY)."""

    model_config = ConfigDict(extra="ignore")

    gpu_uuid: Annotated[str, Field(min_length=1, max_length=96)]
    link: Annotated[int, Field(ge=0, le=255, strict=True)]
    sampled_at: Timestamp
    state: Literal["up", "down", "unknown"] = "unknown"
    speed_gbps: Number | None = None
    remote_pci_bus_id: Annotated[str, Field(max_length=32)] | None = None
    remote_device_type: Literal["gpu", "nvswitch", "cpu", "unknown"] | None = None
    tx_bytes_per_s: Number | None = None
    rx_bytes_per_s: Number | None = None
    crc_errors: Number | None = None
    replay_errors: Number | None = None
    recovery_errors: Number | None = None


class NvlinkOut(BaseModel):
    """The newest reading of one GPU link."""

    model_config = ConfigDict(from_attributes=True)

    gpu_uuid: str
    gpu_index: int
    link: int
    sampled_at: datetime
    state: str
    speed_gbps: float | None
    remote_pci_bus_id: str | None
    remote_device_type: str | None
    tx_bytes_per_s: float | None
    rx_bytes_per_s: float | None
    crc_errors: int | None
    replay_errors: int | None
    recovery_errors: int | None


class NvlinksOut(BaseModel):
    """``GET /api/v1/nodes/{hostname}/nvlinks``: the newest reading of every link, by GPU index
    and link number."""

    hostname: str
    nvlinks: list[NvlinkOut]
