"""The ``nic_port_sample`` table: one row per NIC, port and ``sampled_at``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Double, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class NicPortSample(Base):
    """One InfiniBand/RoCE port (``/sys/class/infiniband/<device>/ports/<port>/``) at one time.

    ``state`` and ``phys_state`` are the words of sysfs' files (``ACTIVE``, ``LinkUp``,
    ``Polling`` …); rates are bytes per second; the ``*_count`` columns are the cumulative port
    counters (``symbol_error``, ``link_downed`` …).
    """

    __tablename__ = "nic_port_sample"
    __table_args__ = (
        Index("ix_nic_port_sample_node_id_sampled_at", "node_id", "sampled_at"),
        Index("ix_nic_port_sample_sampled_at", "sampled_at"),
    )

    node_id: Mapped[int] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    port: Mapped[int] = mapped_column(Integer, primary_key=True)
    sampled_at: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    link_layer: Mapped[str | None] = mapped_column(String(32))
    state: Mapped[str | None] = mapped_column(String(32))
    phys_state: Mapped[str | None] = mapped_column(String(32))
    rate_gbps: Mapped[float | None] = mapped_column(Double)
    tx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    rx_bytes_per_s: Mapped[float | None] = mapped_column(Double)
    symbol_error_count: Mapped[int | None] = mapped_column(BigInteger)
    link_downed_count: Mapped[int | None] = mapped_column(BigInteger)
    link_error_recovery_count: Mapped[int | None] = mapped_column(BigInteger)
    port_rcv_errors_count: Mapped[int | None] = mapped_column(BigInteger)
    port_xmit_discards_count: Mapped[int | None] = mapped_column(BigInteger)
