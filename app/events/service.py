"""Queries over node events (Xid, GPU lost, throttling …) for the node page, and the events
the server itself records about a node."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import func, or_, select
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


def list_node_events_between(
    session: Session,
    *,
    node_id: int,
    start: datetime,
    end: datetime,
    gpu_ids: Collection[int],
    limit: int = 500,
) -> list[NodeEvent]:
    """The node's events that occurred in ``[start, end]`` and are tied to one of ``gpu_ids``
    or to no GPU (a kernel Xid line names only a PCI address; a server event names none),
    oldest first: the newest ``limit`` of them."""
    stmt = (
        select(NodeEvent)
        .where(
            NodeEvent.node_id == node_id,
            NodeEvent.occurred_at >= start,
            NodeEvent.occurred_at <= end,
            or_(NodeEvent.gpu_id.in_(sorted(gpu_ids)), NodeEvent.gpu_id.is_(None)),
        )
        .order_by(NodeEvent.occurred_at.desc(), NodeEvent.id.desc())
        .limit(limit)
    )
    return list(reversed(session.scalars(stmt).all()))


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


def last_xid_by_gpu(session: Session) -> dict[int, int]:
    """GPU id → the Xid number of its newest Xid event still stored (the events retention), by
    the agent's ``occurred_at``, ties broken by arrival order; GPUs with none are left out, and
    so are the self-test's synthetic Xids (``test``) and Xids that name no known GPU. One
    statement."""
    newest_first = (NodeEvent.occurred_at.desc(), NodeEvent.id.desc())
    ranked = (
        select(
            NodeEvent.gpu_id,
            NodeEvent.xid,
            func.row_number()
            .over(partition_by=NodeEvent.gpu_id, order_by=newest_first)
            .label("rank"),
        )
        .where(
            NodeEvent.kind == "xid",
            NodeEvent.gpu_id.is_not(None),
            NodeEvent.xid.is_not(None),
            NodeEvent.test.is_(False),
        )
        .subquery("ranked_xid")
    )
    rows = session.execute(select(ranked.c.gpu_id, ranked.c.xid).where(ranked.c.rank == 1))
    return {gpu_id: xid for gpu_id, xid in rows}
