"""Shared SQL for the sample-based kinds: per-entity aggregates over a window that ends at each
node's newest sample (agent clock: skew neither empties nor stretches it), for fresh nodes in
scope only, without loading histories into Python."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Select, and_, literal, select
from sqlalchemy.sql.elements import ColumnElement

from app.alerts.context import EvalContext
from app.alerts.spec import Scope
from app.alerts.targets import Target
from app.db import epoch_s
from app.fleet.models import Gpu, Node


def entity_columns(target: Target) -> list[Any]:
    """The owner and key columns of ``target``'s table, and the node id."""
    t = target.table
    if target.owner == "gpu_id":
        return [t.c.gpu_id, Gpu.node_id.label("node_id")]
    return [t.c.node_id, *(t.c[k] for k in target.keys)]


def within(ctx: EvalContext, when: Any, newest: Any, window_s: float) -> ColumnElement[bool]:
    """``when >= newest − window_s``: on Postgres as timestamps (integer compares over
    millions of rows), elsewhere through :class:`app.db.epoch_s`."""
    if ctx.session.get_bind().dialect.name == "postgresql":
        return cast(ColumnElement[bool], when >= newest - literal(timedelta(seconds=window_s)))
    return cast(ColumnElement[bool], epoch_s(when) >= epoch_s(newest) - window_s)


def earliest_newest(ctx: EvalContext, node_ids: set[int]) -> datetime | None:
    """The earliest ``last_sample_at`` of ``node_ids`` (None when none has a sample): minus a
    window, the lower bound of an index range that holds every node's window."""
    return min(
        (t for t in (ctx.nodes[i].last_sample_at for i in node_ids) if t is not None),
        default=None,
    )


def windowed(
    ctx: EvalContext, target: Target, scope: Scope, window_s: float, *columns: Any
) -> Select[Any] | None:
    """``SELECT columns`` from ``target``'s samples within ``window_s`` of each node's newest
    sample, joined to its node (and GPU); None when no fresh node is in scope."""
    t = target.table
    scoped = ctx.scoped_nodes(scope)
    node_ids = ctx.fresh_node_ids if scoped is None else ctx.fresh_node_ids & scoped
    earliest = earliest_newest(ctx, node_ids)
    if earliest is None:
        return None
    lower = earliest - timedelta(seconds=window_s)
    stmt = select(*columns).select_from(t)
    if target.owner == "gpu_id":
        stmt = stmt.join(Gpu, Gpu.id == t.c.gpu_id).join(Node, Node.id == Gpu.node_id)
    else:
        stmt = stmt.join(Node, Node.id == t.c.node_id)
    conditions: list[ColumnElement[bool]] = [
        t.c.sampled_at >= lower,  # index range; the per-node bound below is exact
        within(ctx, t.c.sampled_at, Node.last_sample_at, window_s),
    ]
    if ctx.only_nodes is not None or len(node_ids) < len(ctx.nodes):
        conditions.append(Node.id.in_(sorted(node_ids)))
    return stmt.where(and_(*conditions))
