"""Queries over node events (Xid, GPU lost, throttling …) for the node page, and the events
the server itself records about a node."""

from __future__ import annotations

from datetime import datetime

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


def record_server_event(
    session: Session, *, node_id: int, kind: str, message: str, at: datetime
) -> NodeEvent:
    """Store an event the server observed about a node (not an agent's report), e.g.
    ``quarantine_blocked``; event rules see it like any other (flushes)."""
    event = NodeEvent(
        node_id=node_id, occurred_at=at, received_at=at, kind=kind, message=message, test=False
    )
    session.add(event)
    session.flush()
    return event
