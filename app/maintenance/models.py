"""The ``maintenance_window`` table, owned by :mod:`app.maintenance`.

A window covers the nodes its ``matchers`` select (Alertmanager matchers over a node's labels
and ``hostname``; one node is ``hostname = <name>``) from ``starts_at`` to ``ends_at``. Ending
a window early sets ``ends_at`` to that moment and says who did (``ended_by``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class MaintenanceWindow(Base):
    """Planned maintenance of the nodes ``matchers`` select, with its ``reason``."""

    __tablename__ = "maintenance_window"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    matchers: Mapped[list[dict[str, str]]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text)
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
