"""The ``ingest_batch`` table: every accepted batch id per node, with the response it got, so a
re-sent batch is answered identically and stores nothing twice."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class IngestBatch(Base):
    """An accepted batch; primary key (node_id, batch_id): batch ids are unique per node."""

    __tablename__ = "ingest_batch"

    node_id: Mapped[int] = mapped_column(
        ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    batch_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
