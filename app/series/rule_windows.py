"""Rows of a rule target's samples within a window that ends at each node's newest sample
(agent clock: skew neither empties nor stretches it), for fresh nodes in scope only, without
loading histories into Python: the base of the alert evaluator's scans
(:mod:`app.series.rule_scans`).

The evaluation's view of the fleet comes in as a :class:`RuleFleet` (the alert evaluator's
context is one): its session, nodes, which of them are fresh, and the node-scoped evaluation's
nodes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from sqlalchemy import Select, and_, literal, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.db import epoch_s
from app.fleet.models import Gpu, Node
from app.series.rule_targets import Target


class RuleFleet(Protocol):
    """What a rule's scan needs of an evaluation: ``nodes`` by id (``last_sample_at``: the
    node's newest sample, agent clock), the ids of the ``fresh_node_ids`` (reporting), the
    ``only_nodes`` of a node-scoped evaluation (None: the whole fleet) and the nodes a rule's
    scope admits (``scoped_nodes``: None for every node)."""

    @property
    def session(self) -> Session: ...

    @property
    def nodes(self) -> Mapping[int, Any]: ...

    @property
    def fresh_node_ids(self) -> set[int]: ...

    @property
    def only_nodes(self) -> Any: ...

    def scoped_nodes(self, scope: Any) -> set[int] | None: ...


def entity_columns(target: Target) -> list[Any]:
    """The owner and key columns of ``target``'s table, and the node id."""
    t = target.table
    if target.owner == "gpu_id":
        return [t.c.gpu_id, Gpu.node_id.label("node_id")]
    return [t.c.node_id, *(t.c[k] for k in target.keys)]


def within(ctx: RuleFleet, when: Any, newest: Any, window_s: float) -> ColumnElement[bool]:
    """``when >= newest − window_s``: on Postgres as timestamps (integer compares over
    millions of rows), elsewhere through :class:`app.db.epoch_s`."""
    if ctx.session.get_bind().dialect.name == "postgresql":
        return cast(ColumnElement[bool], when >= newest - literal(timedelta(seconds=window_s)))
    return cast(ColumnElement[bool], epoch_s(when) >= epoch_s(newest) - window_s)


def earliest_newest(ctx: RuleFleet, node_ids: set[int]) -> datetime | None:
    """The earliest ``last_sample_at`` of ``node_ids`` (None when none has a sample): minus a
    window, the lower bound of an index range that holds every node's window."""
    return min(
        (t for t in (ctx.nodes[i].last_sample_at for i in node_ids) if t is not None),
        default=None,
    )


def windowed(
    ctx: RuleFleet, target: Target, scope: Any, window_s: float, *columns: Any
) -> Select[Any] | None:
    """``SELECT columns`` from ``target``'s samples within ``window_s`` of each node's newest
    sample, joined to its node (and GPU); None when no fresh node is in ``scope`` (a rule's
    scope, None for every node)."""
    t = target.table
    scoped = None if scope is None else ctx.scoped_nodes(scope)
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
