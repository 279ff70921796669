"""Each GPU's newest stored sample, and which GPUs reported a metric lately.

The ingest keeps ``gpu.last_sample_at`` the newest stored ``sampled_at`` of each GPU, so the
newest sample is a primary-key lookup per GPU on ``(gpu_id, gpu.last_sample_at)``, with no
list of ids sent and no scan.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, select
from sqlalchemy.orm import Session

from app.fleet.models import Gpu
from app.series.tables import gpu_sample


def newest(
    metrics: Sequence[str],
    *,
    node_ids: Collection[int] | None = None,
    gpu_ids: Collection[int] | None = None,
    received_since: datetime | None = None,
) -> Select[Any]:
    """``SELECT gpu_id, *metrics`` of each GPU's newest sample (of the nodes ``node_ids``
    and/or the GPUs ``gpu_ids``; None: every GPU); a GPU with no sample has a row of NULLs,
    ``gpu_id`` included. Written as ``gpu LEFT JOIN gpu_sample`` so that SQLite, which keeps a
    left join's order, looks each GPU's sample up by primary key instead of scanning samples.
    The statement selects from ``gpu``: a caller may add the inventory's columns and joins.

    ``received_since``: a GPU whose newest sample the server received (its clock) before
    that time gets a row of NULLs too. The condition is part of the join, not a filter
    after it: a filter on ``gpu_sample`` lets SQLite turn the join around and scan every
    sample received since (its ``received_at`` index) instead of one lookup per GPU.

    Raises:
        KeyError: a name of ``metrics`` is not a GPU metric column.
    """
    t = gpu_sample.c
    joined = and_(t.gpu_id == Gpu.id, t.sampled_at == Gpu.last_sample_at)
    if received_since is not None:
        joined = and_(joined, t.received_at >= received_since)
    stmt = (
        select(t.gpu_id, *(t[name] for name in metrics))
        .select_from(Gpu)
        .outerjoin(gpu_sample, joined)
    )
    if node_ids is not None:
        stmt = stmt.where(Gpu.node_id.in_(list(node_ids)))
    if gpu_ids is not None:
        stmt = stmt.where(Gpu.id.in_(list(gpu_ids)))
    return stmt


def newest_by_gpu(
    session: Session,
    metrics: Sequence[str],
    *,
    node_ids: Collection[int] | None = None,
    gpu_ids: Collection[int] | None = None,
) -> dict[int, dict[str, Any]]:
    """GPU id → ``{metric: value}`` of its newest sample (see :func:`newest`); GPUs with no
    sample are left out."""
    rows = session.execute(newest(metrics, node_ids=node_ids, gpu_ids=gpu_ids))
    return {row[0]: dict(zip(metrics, row[1:], strict=True)) for row in rows if row[0] is not None}


def reported_since(
    session: Session, metric: str, *, received_since: datetime, sampled_since: datetime
) -> set[int]:
    """Ids of the GPUs with a non-NULL ``metric`` in a sample received (server time) at or
    after ``received_since``. ``sampled_since`` (agent time, at most ``received_since`` minus
    the fleet's clock skew) bounds the index scan; it never decides.

    Raises:
        KeyError: ``metric`` is not a GPU metric column.
    """
    t = gpu_sample.c
    return set(
        session.scalars(
            select(t.gpu_id)
            .where(
                t.sampled_at >= sampled_since,
                t.received_at >= received_since,
                t[metric].isnot(None),
            )
            .distinct()
        )
    )
