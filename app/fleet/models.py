"""Tables of the fleet inventory: ``node`` and ``gpu``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ColumnElement, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db import Base, UTCDateTime


class Node(Base):
    """A GPU node, created by ``fleetwatch token create`` or its first accepted batch.

    ``last_seen_at`` is the server's receive time of the latest accepted batch (what freshness is
    judged by, so agent clock skew cannot make a node look dead); ``last_sample_at`` is the agent's
    timestamp of its newest stored sample; ``clock_skew_s`` is ``sent_at - received_at`` of the
    latest batch. ``collector`` (``nvml``, ``simulated`` …) and ``collection_errors`` (``[{"source",
    "message"}]``) are those of the latest batch that said (agents 0.2 and later).
    ``retired_at`` / ``retired_reason``: taken out of the fleet by an operator
    (:mod:`app.fleet.retire`): its tokens revoked, it leaves the fleet's lists, counts, health
    and alert evaluation (its alerts resolve), its history stays; a batch from it under a new
    token brings it back (NULL again). ``expected_gpu_count``: the GPUs the node should have,
    as the latest batch's agent said (PCI display controllers, or ``--expected-gpus``); a
    shortfall against its inventory counts as missing GPUs.
    """

    __tablename__ = "node"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hostname: Mapped[str] = mapped_column(String(253), unique=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    agent_version: Mapped[str | None] = mapped_column(String(64))
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_version: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    first_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_sample_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    clock_skew_s: Mapped[float | None] = mapped_column(Float)
    collector: Mapped[str | None] = mapped_column(String(32))
    collection_errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    retired_reason: Mapped[str | None] = mapped_column(Text)
    expected_gpu_count: Mapped[int | None] = mapped_column(Integer)

    gpus: Mapped[list[Gpu]] = relationship(back_populates="node", order_by="Gpu.index")


class Gpu(Base):
    """One physical GPU, identified by its NVML UUID (``nvmlDeviceGetUUID``).

    ``state`` is ``ok``, ``lost`` (NVML ``GPU_IS_LOST``) or ``unknown_error`` as last reported.
    ``last_sample_at`` is the newest stored sample ``sampled_at`` of this GPU, so the latest
    values are one primary-key lookup away instead of a scan. ``unavailable`` (metric → NVML
    return code name), ``mig_instances`` and ``processes`` are as of the latest batch;
    ``implausible`` (metric → ``sampled_at``, ISO 8601) names the metrics of the newest sample
    that the server dropped as implausible (:mod:`app.metrics.plausible`);
    ``implausible_inventory`` (field → the value sent, JSON text of at most 64 characters) the
    fields of the latest inventory entry that it left out (:mod:`app.ingest.salvage`), null
    when none.
    """

    __tablename__ = "gpu"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"), index=True)
    uuid: Mapped[str] = mapped_column(String(96), unique=True)
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(String(256))
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    mem_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    mig_mode: Mapped[str | None] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(32), default="ok")
    state_reason: Mapped[str | None] = mapped_column(String(1024))
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_sample_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    unavailable: Mapped[dict[str, str] | None] = mapped_column(JSON)
    implausible: Mapped[dict[str, str] | None] = mapped_column(JSON)
    implausible_inventory: Mapped[dict[str, str] | None] = mapped_column(JSON)
    mig_instances: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    processes: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)

    node: Mapped[Node] = relationship(back_populates="gpus")


def in_service() -> ColumnElement[bool]:
    """SQL: the node is not retired (what every fleet list, count, health and alert reads)."""
    return Node.retired_at.is_(None)
