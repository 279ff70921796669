"""The health state table: each node's health as last evaluated, kept current by
:mod:`app.health.state` (owned by the health package; other packages read it through
:func:`app.health.current.health_of`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base, UTCDateTime


class NodeHealthState(Base):
    """One node's health evaluated as if it were fresh (staleness is applied when read, from
    ``node.last_seen_at``, so it is exact to the second without a write).

    ``doc`` is the :class:`~app.health.schemas.NodeHealthOut` as JSON text (orjson; reasons
    with their GPU index, the GPUs with theirs); ``digest`` a hash of it, so an evaluation that
    finds the same answer writes nothing but ``seen_at``/``evaluated_at``. ``version`` grows
    (fleet-wide) each time ``doc`` changes: a client that saw version *v* needs only the rows
    above it. ``since`` is when ``state`` last changed; ``seen_at`` the node's
    ``last_seen_at`` the evaluation read (the node is evaluated again when it differs)."""

    __tablename__ = "node_health_state"

    node_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("node.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(BigInteger, index=True)
    state: Mapped[str] = mapped_column(String(16))
    since: Mapped[datetime] = mapped_column(UTCDateTime())
    seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    evaluated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    digest: Mapped[str] = mapped_column(String(32))
    doc: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text)
