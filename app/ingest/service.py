"""Storing an accepted ingest batch: node and GPU inventory, samples, events, node sections,
topology, idempotency.

The whole batch is one transaction (the caller's). Policies are documented in ``docs/ingest.md``.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import Forbidden
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.ingest import samples as sample_store
from app.ingest import sections as section_store
from app.ingest.gpu_schemas import MIG_BOUNDS, PROCESS_BOUNDS
from app.ingest.models import IngestBatch
from app.ingest.schemas import IngestBatchIn, IngestResult
from app.metrics.plausible import Bound, clean_numbers
from app.topology import service as topology_service


def store_batch(
    session: Session,
    *,
    node: Node,
    batch: IngestBatchIn,
    received_at: datetime,
    future_tolerance_s: float,
    retention_days: float,
) -> IngestResult:
    """Store ``batch`` from the authenticated ``node``, or replay the answer of an earlier delivery.

    Returns:
        the counts of stored, duplicate and rejected samples (``replayed=True`` for a re-sent
        batch id, with the first delivery's counts).

    Raises:
        Forbidden: ``batch.node.hostname`` is not the token's node.
    """
    if batch.node.hostname != node.hostname:
        raise Forbidden(
            f"node.hostname {batch.node.hostname!r} does not match this token's node "
            f"{node.hostname!r}"
        )
    stored = session.get(IngestBatch, (node.id, batch.batch_id))
    if stored is not None:
        return IngestResult.model_validate({**stored.result, "replayed": True})
    marker = IngestBatch(
        node_id=node.id, batch_id=batch.batch_id, received_at=received_at, result={}
    )
    try:
        with session.begin_nested():
            session.add(marker)
            session.flush()
    except IntegrityError:
        # The same batch is being stored by a concurrent request: answer as a replay.
        if marker in session:
            session.expunge(marker)
        stored = session.get(IngestBatch, (node.id, batch.batch_id), populate_existing=True)
        if stored is None:
            raise
        return IngestResult.model_validate({**stored.result, "replayed": True})

    skew_s = (batch.sent_at - received_at).total_seconds()
    newest_allowed = received_at + timedelta(seconds=future_tolerance_s)
    oldest_allowed = received_at - timedelta(days=retention_days)
    nulled: Counter[str] = Counter()
    _update_node(node, batch=batch, received_at=received_at, skew_s=skew_s)
    gpus = _upsert_gpus(session, node=node, batch=batch, received_at=received_at, nulled=nulled)
    result = sample_store.store_samples(
        session,
        gpus=gpus,
        batch=batch,
        received_at=received_at,
        newest_allowed=newest_allowed,
        oldest_allowed=oldest_allowed,
    )
    nulled.update(result.pop("nulled_values"))
    newest = max((g.last_sample_at for g in gpus.values() if g.last_sample_at), default=None)
    if newest is not None and (node.last_sample_at is None or newest > node.last_sample_at):
        node.last_sample_at = newest
    events_stored = _store_events(
        session, node=node, gpus=gpus, batch=batch, received_at=received_at
    )
    sections = section_store.store_sections(
        session,
        node=node,
        gpus=gpus,
        batch=batch,
        newest_allowed=newest_allowed,
        oldest_allowed=oldest_allowed,
        nulled=nulled,
    )
    changed = None
    if batch.topology is not None:
        changed = topology_service.record_topology(
            session,
            node=node,
            topology=batch.topology,
            received_at=received_at,
            nulled=nulled,
            rejected=sections.rejected,
        )

    answer = IngestResult(
        batch_id=batch.batch_id,
        received_at=received_at,
        clock_skew_s=round(skew_s, 3),
        events_stored=events_stored,
        nulled_values=dict(nulled),
        sections_stored=sections.stored,
        sections_rejected=dict(sections.rejected),
        topology_changed=changed,
        **result,
    )
    marker.result = answer.model_dump(mode="json")
    session.flush()
    return answer


def _update_node(node: Node, *, batch: IngestBatchIn, received_at: datetime, skew_s: float) -> None:
    info = batch.node
    node.labels = dict(info.labels)
    node.agent_version = info.agent_version
    node.driver_version = info.driver_version
    node.cuda_version = info.cuda_version
    node.first_seen_at = node.first_seen_at or received_at
    if node.last_seen_at is None or received_at >= node.last_seen_at:
        node.last_seen_at = received_at
        node.clock_skew_s = round(skew_s, 3)
        if batch.collection is not None:
            node.collector = batch.collection.collector
            node.collection_errors = [e.model_dump() for e in batch.collection.errors]


def _upsert_gpus(
    session: Session,
    *,
    node: Node,
    batch: IngestBatchIn,
    received_at: datetime,
    nulled: Counter[str],
) -> dict[str, Gpu]:
    """The node's GPUs by UUID after applying the batch's inventory. A UUID seen on another node
    moves to this one: the card was physically moved."""
    by_uuid = {g.uuid: g for g in session.scalars(select(Gpu).where(Gpu.node_id == node.id))}
    wanted = [g.uuid for g in batch.gpus if g.uuid not in by_uuid]
    if wanted:
        for gpu in session.scalars(select(Gpu).where(Gpu.uuid.in_(wanted))):
            gpu.node_id = node.id
            by_uuid[gpu.uuid] = gpu
    for info in batch.gpus:
        found = by_uuid.get(info.uuid)
        if found is None:
            gpu = Gpu(uuid=info.uuid, node_id=node.id, first_seen_at=received_at)
            session.add(gpu)
            by_uuid[info.uuid] = gpu
        else:
            gpu = found
        gpu.index = info.index
        gpu.name = info.name
        gpu.pci_bus_id = info.pci_bus_id
        gpu.mem_total_bytes = info.mem_total_bytes
        gpu.mig_mode = info.mig_mode
        gpu.state = info.state
        gpu.state_reason = info.state_reason
        gpu.unavailable = dict(info.unavailable) if info.unavailable is not None else None
        gpu.mig_instances = _clean_list(info.mig_instances, MIG_BOUNDS, "mig_instances", nulled)
        gpu.processes = _clean_list(info.processes, PROCESS_BOUNDS, "processes", nulled)
        gpu.last_seen_at = received_at
    session.flush()
    return by_uuid


def _clean_list(
    entries: list[Any] | None, bounds: dict[str, Bound], prefix: str, nulled: Counter[str]
) -> list[dict[str, Any]] | None:
    """JSON-ready dicts of ``entries`` (pydantic models) with implausible numbers nulled."""
    if entries is None:
        return None
    items: list[BaseModel] = entries
    return [
        clean_numbers(item.model_dump(mode="json"), bounds, prefix=prefix, nulled=nulled)
        for item in items
    ]


def _store_events(
    session: Session,
    *,
    node: Node,
    gpus: dict[str, Gpu],
    batch: IngestBatchIn,
    received_at: datetime,
) -> int:
    """Store every event as its own row; events are never rejected for their timestamp, because
    fault evidence from a skewed clock is still evidence."""
    by_bus = {g.pci_bus_id.lower(): g for g in gpus.values() if g.pci_bus_id}
    for event in batch.events:
        gpu = gpus.get(event.gpu_uuid) if event.gpu_uuid else None
        if gpu is None and event.pci_bus_id:
            gpu = by_bus.get(event.pci_bus_id.lower())
        session.add(
            NodeEvent(
                node_id=node.id,
                gpu_id=gpu.id if gpu else None,
                occurred_at=event.occurred_at,
                received_at=received_at,
                kind=event.kind,
                xid=event.xid,
                pci_bus_id=event.pci_bus_id,
                message=event.message,
            )
        )
    session.flush()
    return len(batch.events)
