"""The ``incident`` and ``incident_event`` tables, owned by :mod:`app.incidents`.

An incident is one node's fault events grouped while they come within the quiet period of each
other (``FLEETWATCH_INCIDENT_QUIET_S``, 3 minutes, as NVIDIA Fleet Intelligence closes an Xid
burst after 3 minutes of silence). It is open until ``last_event_at`` + quiet has passed: no
sweeper writes its end. ``incident_event`` records every fault event the grouping examined, with
its incident, or NULL for an event that opened none (an application Xid with no incident around
it), so no event is examined twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class Incident(Base):
    """One incident: its span, what it holds and what it asks for.

    ``gpu_indexes`` and ``xids`` are sorted lists; ``kinds`` the event kinds seen (``xid``,
    ``gpu_lost`` …); ``state`` the worst health state its events cause (``unhealthy``,
    ``degraded``); ``job_fatal`` whether an event of it ends the GPU's jobs (a lost GPU, an Xid
    the catalog resolves by restarting the application or more); ``action_code`` /
    ``action_text`` its strongest suggested repair (:mod:`app.health.actions`).
    """

    __tablename__ = "incident"
    __table_args__ = (
        Index("ix_incident_node_id_last_event_at", "node_id", "last_event_at"),
        Index("ix_incident_last_event_at", "last_event_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_event_at: Mapped[datetime] = mapped_column(UTCDateTime())
    event_count: Mapped[int] = mapped_column(Integer)
    gpu_indexes: Mapped[list[Any]] = mapped_column(JSON)
    xids: Mapped[list[Any]] = mapped_column(JSON)
    kinds: Mapped[list[Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    job_fatal: Mapped[bool] = mapped_column(Boolean)
    action_code: Mapped[str] = mapped_column(String(32))
    action_text: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    test: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class IncidentEvent(Base):
    """A fault event the grouping examined: its incident, or NULL (it opened none)."""

    __tablename__ = "incident_event"
    __table_args__ = (Index("ix_incident_event_incident_id", "incident_id"),)

    event_id: Mapped[int] = mapped_column(
        ForeignKey("node_event.id", ondelete="CASCADE"), primary_key=True
    )
    incident_id: Mapped[int | None] = mapped_column(
        ForeignKey("incident.id", ondelete="CASCADE"), nullable=True
    )
