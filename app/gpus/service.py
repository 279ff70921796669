"""Finding one GPU of a node by index or UUID, and reading its events and samples over a range."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.fleet.schemas import SamplesOut, SeriesOut
from app.fleet.service import GpuView, NodeView
from app.metrics import service as metrics_service

EVENTS_SHOWN = 200


def _pick(candidates: list[GpuView]) -> GpuView:
    """Among GPUs sharing an index (NVML renumbered them), the one reporting ``ok`` and most
    recently seen: that is the one ``nvidia-smi -i N`` means now."""
    return max(candidates, key=lambda g: (g.gpu.state == "ok", g.gpu.last_seen_at))


def resolve_gpu(view: NodeView, *, key: str) -> GpuView:
    """The GPU of ``view`` named by ``key``: its index (digits only, NVML index as the agent last
    reported it) or its UUID (``nvmlDeviceGetUUID``, matched case-insensitively).

    Raises:
        NotFound: no GPU of the node has that index or UUID (the message names both).
    """
    text = key.strip()
    if text.isascii() and text.isdigit():
        by_index = [g for g in view.gpus if g.gpu.index == int(text)]
        if by_index:
            return _pick(by_index)
    else:
        folded = text.casefold()
        for g in view.gpus:
            if g.gpu.uuid.casefold() == folded:
                return g
    raise NotFound(f"no GPU {text!r} (index or UUID) on node {view.node.hostname!r}")


def list_gpu_events(
    session: Session, *, gpu: Gpu, start: datetime, end: datetime, limit: int = EVENTS_SHOWN
) -> list[NodeEvent]:
    """Events of ``gpu`` that occurred in ``[start, end]``, newest first: those ingest tied to it
    (``gpu_id``) and those of its node it could not tie to any GPU but that carry its PCI bus id
    (kernel Xid lines name only the PCI address)."""
    mine = NodeEvent.gpu_id == gpu.id
    if gpu.pci_bus_id:
        by_bus = and_(
            NodeEvent.node_id == gpu.node_id,
            NodeEvent.gpu_id.is_(None),
            func.lower(NodeEvent.pci_bus_id) == gpu.pci_bus_id.lower(),
        )
        mine = or_(mine, by_bus)
    stmt = (
        select(NodeEvent)
        .where(mine, NodeEvent.occurred_at >= start, NodeEvent.occurred_at <= end)
        .order_by(NodeEvent.occurred_at.desc(), NodeEvent.id.desc())
        .limit(limit)
    )
    return list(session.scalars(stmt))


def series_of_gpu(
    session: Session,
    *,
    node: Node,
    gpu: Gpu,
    metrics: list[str],
    start: datetime,
    end: datetime,
    step_s: int,
    zone: tzinfo = UTC,
) -> SamplesOut:
    """``metrics`` of ``gpu`` over ``[start, end]`` (bucket averages, or maxima for integer
    metrics, per :func:`app.metrics.service.node_series`; only this GPU's rows are read),
    shaped as the node samples API answers with the one series of this GPU (empty ``t`` when it
    has no samples in the range); buckets of 2 h and more start at midnight of ``zone``.

    Raises:
        KeyError: an unknown metric name (callers validate names first).
    """
    series = metrics_service.node_series_from(
        session,
        node=node,
        metrics=metrics,
        start=start,
        end=end,
        step_s=step_s,
        zone=zone,
        gpu_ids=[gpu.id],
    )
    return SamplesOut(
        hostname=node.hostname,
        start=start,
        end=end,
        step_s=step_s,
        metrics=metrics,
        series=[
            SeriesOut(
                gpu_uuid=s.gpu_uuid,
                gpu_index=s.gpu_index,
                gpu_name=s.gpu_name,
                t=s.times,
                values=s.values,
            )
            for s in series
            if s.gpu_uuid == gpu.uuid
        ],
    )
