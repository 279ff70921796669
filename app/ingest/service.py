"""Storing an accepted ingest batch: node and GPU inventory, samples, events, idempotency.

The whole batch is one transaction (the caller's). Policies are documented in ``docs/ingest.md``.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import Forbidden
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.ingest.models import IngestBatch
from app.ingest.schemas import (
    IngestBatchIn,
    IngestResult,
    Rejection,
    RejectReason,
    metric_values,
)
from app.metrics.catalog import sanitize
from app.metrics.models import gpu_sample

MAX_LISTED_REJECTIONS = 100


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
    _update_node(node, batch=batch, received_at=received_at, skew_s=skew_s)
    gpus = _upsert_gpus(session, node=node, batch=batch, received_at=received_at)
    result = _store_samples(
        session,
        gpus=gpus,
        batch=batch,
        received_at=received_at,
        newest_allowed=received_at + timedelta(seconds=future_tolerance_s),
        oldest_allowed=received_at - timedelta(days=retention_days),
    )
    newest = max((g.last_sample_at for g in gpus.values() if g.last_sample_at), default=None)
    if newest is not None and (node.last_sample_at is None or newest > node.last_sample_at):
        node.last_sample_at = newest
    events_stored = _store_events(
        session, node=node, gpus=gpus, batch=batch, received_at=received_at
    )

    answer = IngestResult(
        batch_id=batch.batch_id,
        received_at=received_at,
        clock_skew_s=round(skew_s, 3),
        events_stored=events_stored,
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


def _upsert_gpus(
    session: Session, *, node: Node, batch: IngestBatchIn, received_at: datetime
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
        gpu.last_seen_at = received_at
    session.flush()
    return by_uuid


def _store_samples(
    session: Session,
    *,
    gpus: dict[str, Gpu],
    batch: IngestBatchIn,
    received_at: datetime,
    newest_allowed: datetime,
    oldest_allowed: datetime,
) -> dict[str, Any]:
    rejections: list[Rejection] = []
    rejected: Counter[str] = Counter()
    nulled: Counter[str] = Counter()
    rows: dict[tuple[int, datetime], dict[str, Any]] = {}
    duplicates = 0
    for index, sample in enumerate(batch.samples):
        gpu = gpus.get(sample.gpu_uuid)
        reason: RejectReason | None = None
        if gpu is None:
            reason = "unknown_gpu"
        elif sample.sampled_at > newest_allowed:
            reason = "sampled_at_in_future"
        elif sample.sampled_at < oldest_allowed:
            reason = "older_than_retention"
        if reason is not None or gpu is None:
            reason = reason or "unknown_gpu"
            rejected[reason] += 1
            if len(rejections) < MAX_LISTED_REJECTIONS:
                rejections.append(Rejection(index=index, gpu_uuid=sample.gpu_uuid, reason=reason))
            continue
        key = (gpu.id, sample.sampled_at)
        if key in rows:
            duplicates += 1
            continue
        row: dict[str, Any] = {
            "gpu_id": gpu.id,
            "sampled_at": sample.sampled_at,
            "received_at": received_at,
        }
        for name, raw in metric_values(sample).items():
            value = sanitize(name, raw)
            if raw is not None and value is None:
                nulled[name] += 1
            row[name] = value
        rows[key] = row

    existing = _existing_keys(session, rows)
    fresh = [row for key, row in rows.items() if key not in existing]
    inserted = _insert_samples(session, fresh)
    duplicates += len(existing) + len(fresh) - inserted
    by_id = {g.id: g for g in gpus.values()}
    for row in fresh:
        gpu = by_id[row["gpu_id"]]
        if gpu.last_sample_at is None or row["sampled_at"] > gpu.last_sample_at:
            gpu.last_sample_at = row["sampled_at"]
    return {
        "samples_received": len(batch.samples),
        "samples_stored": inserted,
        "samples_duplicate": duplicates,
        "samples_rejected": sum(rejected.values()),
        "rejected_by_reason": dict(rejected),
        "rejections": rejections,
        "nulled_values": dict(nulled),
    }


def _existing_keys(
    session: Session, rows: dict[tuple[int, datetime], dict[str, Any]]
) -> set[tuple[int, datetime]]:
    """Which of ``rows``' (gpu_id, sampled_at) keys are already stored."""
    if not rows:
        return set()
    found: set[tuple[int, datetime]] = set()
    by_gpu: dict[int, list[datetime]] = {}
    for gpu_id, ts in rows:
        by_gpu.setdefault(gpu_id, []).append(ts)
    for gpu_id, stamps in by_gpu.items():
        result = session.execute(
            select(gpu_sample.c.sampled_at).where(
                gpu_sample.c.gpu_id == gpu_id,
                gpu_sample.c.sampled_at >= min(stamps),
                gpu_sample.c.sampled_at <= max(stamps),
            )
        )
        found.update((gpu_id, ts) for (ts,) in result)
    return found & rows.keys()


def _insert_samples(session: Session, rows: list[dict[str, Any]]) -> int:
    """Insert rows, skipping any key a concurrent batch stored in the meantime; returns how many
    rows went in (the driver's summed rowcount of the executemany)."""
    if not rows:
        return 0
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    stmt = insert(gpu_sample).on_conflict_do_nothing(index_elements=["gpu_id", "sampled_at"])
    result = cast(CursorResult[Any], session.execute(stmt, rows))
    return result.rowcount if result.rowcount >= 0 else len(rows)


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
