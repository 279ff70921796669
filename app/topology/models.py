"""The topology tables: ``topology_snapshot`` (each distinct topology of a node, once) and
``topology_change`` (when the node's topology became each snapshot: the history of changes).

Two tables because a topology can return to an earlier state (an NVLink goes down and is
retrained: NV18 → NV17 → NV18). The snapshot's digest is unique per node, so the third state is
the first snapshot again, and only a new change row records that it came back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db import Base, UTCDateTime


class TopologySnapshot(Base):
    """One distinct topology document of a node, first seen at ``collected_at`` (agent clock)
    and ``received_at`` (server clock). ``digest`` is the SHA-256 of the document without its
    ``collected_at``, keys sorted."""

    __tablename__ = "topology_snapshot"
    __table_args__ = (
        UniqueConstraint("node_id", "digest", name="uq_topology_snapshot_node_id_digest"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    collected_at: Mapped[datetime] = mapped_column(UTCDateTime())
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    digest: Mapped[str] = mapped_column(String(64))
    partial: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str | None] = mapped_column(String(32))
    document: Mapped[dict[str, Any]] = mapped_column(JSON)


class TopologyChange(Base):
    """The node's topology became ``snapshot`` (its first report, or a report that differs from
    the one before)."""

    __tablename__ = "topology_change"
    __table_args__ = (Index("ix_topology_change_node_id_received_at", "node_id", "received_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    snapshot_id: Mapped[int] = mapped_column(
        ForeignKey("topology_snapshot.id", ondelete="CASCADE"), index=True
    )
    collected_at: Mapped[datetime] = mapped_column(UTCDateTime())
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())

    snapshot: Mapped[TopologySnapshot] = relationship(lazy="joined")


class TopologyDriftState(Base):
    """The fleet's drift as last computed in the background (:mod:`app.topology.drift_state`):
    one row (``id`` 1). ``document`` is JSON text ``{"groups": [GroupSummary…], "findings":
    [DriftFinding…]}`` as of ``computed_at``; ``topology_seen_at`` the newest topology receive
    time it read (a newer snapshot makes it due again)."""

    __tablename__ = "topology_drift_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    topology_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    document: Mapped[str] = mapped_column(Text)
