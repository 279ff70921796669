"""The ``node_lifecycle`` and ``lifecycle_transition`` tables, owned by :mod:`app.lifecycle`.

``node_lifecycle`` holds a node's current state (a node without a row is ``in_service``);
``lifecycle_transition`` every change of it, with its cause, for the node page, the API and the
reliability figures (time out of service).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class NodeLifecycle(Base):
    """A node's current lifecycle state (:mod:`app.lifecycle.states`) and the transition that
    put it there: since when, why, caused by what (``cause`` / ``cause_ref``, e.g.
    ``incident`` / ``"42"``) and by whom (``actor``)."""

    __tablename__ = "node_lifecycle"
    __table_args__ = (Index("ix_node_lifecycle_state", "state"),)

    node_id: Mapped[int] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    state: Mapped[str] = mapped_column(String(16))
    since: Mapped[datetime] = mapped_column(UTCDateTime())
    reason: Mapped[str] = mapped_column(Text)
    cause: Mapped[str] = mapped_column(String(16))
    cause_ref: Mapped[str | None] = mapped_column(String(64), nullable=True)
    actor: Mapped[str] = mapped_column(String(128))
    transition_id: Mapped[int] = mapped_column(Integer)


class LifecycleTransition(Base):
    """One change of a node's lifecycle state."""

    __tablename__ = "lifecycle_transition"
    __table_args__ = (Index("ix_lifecycle_transition_node_id_at", "node_id", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    cause: Mapped[str] = mapped_column(String(16))
    cause_ref: Mapped[str | None] = mapped_column(String(64), nullable=True)
    actor: Mapped[str] = mapped_column(String(128))
