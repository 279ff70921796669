"""Questions over each GPU's recent raw samples that health asks: how often a bit of a
bit-field metric was set in a window, whether a sample after a given time shows a condition,
whether an NVLink read ``up`` after a given time.

Both read raw rows only: their windows (minutes) are far inside the raw span kept before
compaction (:func:`app.series.jobs.raw_spans_s`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, or_, select, true
from sqlalchemy.orm import Session

from app.fleet.models import Gpu, Node
from app.health.sql import before
from app.series.tables import NvlinkSample, gpu_sample

Columns = Any  # a table's ``.c``: the sample columns by metric name
NodeFilter = Callable[[Any], ColumnElement[bool]]


def bit_counts(
    metric: str,
    masks: Sequence[int],
    *,
    window_s: float,
    dialect: str,
    nodes: NodeFilter,
) -> Select[Any]:
    """Per GPU of the nodes ``nodes(node.id)`` admits, over the ``window_s`` seconds ending at
    its node's newest sample (``node.last_sample_at``): ``gpu_id``, the samples with a
    ``metric`` value, then per mask of ``masks`` the samples with a bit of it set and the
    ``sampled_at`` of the first of them. GPUs with no such sample have no row.

    Raises:
        KeyError: ``metric`` is not a GPU metric column.
    """
    bits = gpu_sample.c[metric]
    at = gpu_sample.c.sampled_at
    counts: list[Any] = [func.count()]
    for mask in masks:
        hit = bits.op("&")(mask) != 0
        counts += [func.sum(case((hit, 1), else_=0)), func.min(case((hit, at)))]
    gpu, node = Gpu.__table__.c, Node.__table__.c
    if dialect == "postgresql":
        # One index range scan of (gpu_id, sampled_at) per GPU, forced by LATERAL: joined,
        # Postgres read the whole table (2.2 s for 1,000 nodes × 2 h; 0.44 s this way).
        bounds = (
            select(gpu.id.label("gpu_id"), before(node.last_sample_at, window_s).label("lo"))
            .join(Node.__table__, node.id == gpu.node_id)
            .where(nodes(node.id))
            .cte("throttle_bounds")
            .prefix_with("MATERIALIZED")
        )
        per_gpu = (
            select(*(c.label(f"c{i}") for i, c in enumerate(counts)))
            .where(gpu_sample.c.gpu_id == bounds.c.gpu_id, at >= bounds.c.lo, bits.is_not(None))
            .lateral("per_gpu")
        )
        return (
            select(bounds.c.gpu_id, *per_gpu.c)
            .select_from(bounds)
            .join(per_gpu, true())
            .where(per_gpu.c.c0 > 0)
        )
    return (
        select(gpu_sample.c.gpu_id, *counts)
        .join(Gpu.__table__, gpu.id == gpu_sample.c.gpu_id)
        .join(Node.__table__, node.id == gpu.node_id)
        .where(nodes(node.id), at >= before(node.last_sample_at, window_s), bits.is_not(None))
        .group_by(gpu_sample.c.gpu_id)
    )


def shown_after(
    session: Session, since: Mapping[int, datetime], condition: Callable[[Columns], Any]
) -> set[int]:
    """Ids of the GPUs of ``since`` (GPU id → time) with a sample after their time for which
    ``condition(columns)`` holds (``columns``: the sample columns by metric name). One
    statement."""
    if not since:
        return set()
    s = gpu_sample.c
    stmt = select(s.gpu_id).where(
        condition(s),
        or_(*(and_(s.gpu_id == gpu_id, s.sampled_at > at) for gpu_id, at in since.items())),
    )
    return set(session.scalars(stmt.distinct()))


def links_up_after(
    session: Session, since: Mapping[int, tuple[Collection[int], datetime]]
) -> set[int]:
    """Ids of the GPUs of ``since`` (GPU id → (link numbers, time)) with an ``up`` reading of
    one of those links after that time. One statement."""
    if not since:
        return set()
    link = NvlinkSample.__table__.c
    stmt = select(link.gpu_id).where(
        link.state == "up",
        or_(
            *(
                and_(link.gpu_id == gpu_id, link.link.in_(list(links)), link.sampled_at > at)
                for gpu_id, (links, at) in since.items()
            )
        ),
    )
    return set(session.scalars(stmt.distinct()))
