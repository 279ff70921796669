"""Queries over node events (Xid, GPU lost, throttling …) for the node page."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.events.models import NodeEvent


def list_node_events(session: Session, *, node_id: int, limit: int = 50) -> list[NodeEvent]:
    """The newest ``limit`` events of the node, newest first (by the agent's ``occurred_at``,
    ties broken by arrival order)."""
    stmt = (
        select(NodeEvent)
        .where(NodeEvent.node_id == node_id)
        .order_by(NodeEvent.occurred_at.desc(), NodeEvent.id.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))
