"""Storing the GPU samples of a batch: unknown GPU, future and too-old samples rejected,
implausible values nulled, duplicates skipped."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.fleet.models import Gpu
from app.ingest.schemas import IngestBatchIn, Rejection, RejectReason, metric_values
from app.metrics.catalog import sanitize
from app.metrics.models import gpu_sample
from app.timeseries import insert_ignoring_conflicts

MAX_LISTED_REJECTIONS = 100


def store_samples(
    session: Session,
    *,
    gpus: dict[str, Gpu],
    batch: IngestBatchIn,
    received_at: datetime,
    newest_allowed: datetime,
    oldest_allowed: datetime,
) -> dict[str, Any]:
    """Store the batch's GPU samples (policies in docs/ingest.md, "Sample policies"); returns
    the ``samples_*``, ``rejected_by_reason``, ``rejections`` and ``nulled_values`` counts of
    the answer."""
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
    inserted = insert_ignoring_conflicts(session, gpu_sample, fresh, key=("gpu_id", "sampled_at"))
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
