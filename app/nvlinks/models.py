"""The ``nvlink_sample`` table: one row per GPU, link and ``sampled_at``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Double, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class NvlinkSample(Base):
    """One NVLink of a GPU at one time (``nvmlDeviceGetNvLinkState``, ``…RemotePciInfo``,
    ``…RemoteDeviceType``, throughput field values and ``…GetNvLinkErrorCounter``).

    ``speed_gbps`` is the link's speed in GB/s as nvidia-smi prints it (26.562 on H100);
    ``crc_errors``, ``replay_errors`` and ``recovery_errors`` are cumulative counters.
    """

    __tablename__ = "nvlink_sample"
    __table_args__ = (
        Index("ix_nvlink_sample_gpu_id_sampled_at", "gpu_id", "sampled_at"),
        Index("ix_nvlink_sample_sampled_at", "sampled_at"),
    )

    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpu.id", ondelete="CASCADE"), primary_key=True)
    link: Mapped[int] = mapped_column(Integer, primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    speed_gbps: Mapped[float | None] = mapped_column(Double)
    remote_pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    remote_device_type: Mapped[str | None] = mapped_column(String(16))
    tx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    rx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    crc_errors: Mapped[int | None] = mapped_column(BigInteger)
    replay_errors: Mapped[int | None] = mapped_column(BigInteger)
    recovery_errors: Mapped[int | None] = mapped_column(BigInteger)
