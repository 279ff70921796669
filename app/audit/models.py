"""The ``audit_event`` table (owned by :mod:`app.audit.service`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class AuditEvent(Base):
    """One change or action. ``actor``: ``user:NAME``, ``token:NAME``, ``agent:HOST``,
    ``anonymous`` or ``cli`` (a command on the server machine); ``action``:
    ``METHOD /route/{template}`` or a named action (``login``, ``user.create`` …);
    ``target``: the path parameters or the object's key; ``status``: the HTTP status answered
    (``None`` outside HTTP); ``detail``: before/after or other facts where cheap."""

    __tablename__ = "audit_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    actor: Mapped[str] = mapped_column(String(160), index=True)
    address: Mapped[str | None] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(255), index=True)
    target: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    status: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
