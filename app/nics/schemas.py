"""NIC port payload entries (``nic_ports`` in docs/ingest.md) and the read API's answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.metrics.plausible import Bound, Number, Timestamp

MAX_NIC_PORTS = 20_000

_COUNT = Bound(0, 1e15, integer=True)

#: Plausible ranges; outside them a value is stored as null and counted (``nic_ports.<field>``).
BOUNDS: dict[str, Bound] = {
    "rate_gbps": Bound(0, 10_000),
    "tx_bytes_per_s": Bound(0, 1e13),
    "rx_bytes_per_s": Bound(0, 1e13),
    "symbol_error_count": _COUNT,
    "link_downed_count": _COUNT,
    "link_error_recovery_count": _COUNT,
    "port_rcv_errors_count": _COUNT,
    "port_xmit_discards_count": _COUNT,
}

Word = Annotated[str, Field(max_length=32)]


class NicPortIn(BaseModel):
    """One InfiniBand/RoCE port at one time, from ``/sys/class/infiniband/*/ports/*/``."""

    model_config = ConfigDict(extra="ignore")

    sampled_at: Timestamp
    device: Annotated[str, Field(min_length=1, max_length=64)]
    port: Annotated[int, Field(ge=0, le=255, strict=True)]
    link_layer: Word | None = None
    state: Word | None = None
    phys_state: Word | None = None
    rate_gbps: Number | None = None
    tx_bytes_per_s: Number | None = None
    rx_bytes_per_s: Number | None = None
    symbol_error_count: Number | None = None
    link_downed_count: Number | None = None
    link_error_recovery_count: Number | None = None
    port_rcv_errors_count: Number | None = None
    port_xmit_discards_count: Number | None = None


class NicPortOut(BaseModel):
    """The newest reading of one port."""

    model_config = ConfigDict(from_attributes=True)

    device: str
    port: int
    sampled_at: datetime
    link_layer: str | None
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    tx_bytes_per_s: float | None
    rx_bytes_per_s: float | None
    symbol_error_count: int | None
    link_downed_count: int | None
    link_error_recovery_count: int | None
    port_rcv_errors_count: int | None
    port_xmit_discards_count: int | None


class NicsOut(BaseModel):
    """``GET /api/v1/nodes/{hostname}/nics``: the newest reading of every port."""

    hostname: str
    nic_ports: list[NicPortOut]
