"""The ``node_event`` table: Xid and other fault events, one row per occurrence."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class NodeEvent(Base):
    """One event as reported by the agent (``kind`` e.g. ``xid``, ``gpu_lost``).

    ``gpu_id`` is set when the event names a known GPU of the node; ``pci_bus_id`` keeps what the
    agent said either way (kernel Xid lines carry only the PCI address). ``test``: a synthetic
    fault of the alert-path self-test (``fleetwatch-agent --inject-test-xid``).
    """

    __tablename__ = "node_event"
    __table_args__ = (
        Index("ix_node_event_node_id_occurred_at", "node_id", "occurred_at"),
        Index("ix_node_event_occurred_at", "occurred_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    gpu_id: Mapped[int | None] = mapped_column(ForeignKey("gpu.id", ondelete="SET NULL"))
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime())
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(String(64))
    xid: Mapped[int | None] = mapped_column(Integer)
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    test: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
