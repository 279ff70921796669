"""The GPU samples of a batch: unknown GPU, future and too-old samples rejected, implausible
values (nulled by :mod:`app.ingest.rows`) counted, duplicates skipped.

:func:`plan_samples` decides everything that needs no database; the rows then go in with the
node sections (:func:`app.series.writes.insert_staged`), and :func:`samples_result` makes the
answer's counts from how many went in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.fleet.models import Gpu
from app.ingest.rows import SampleRow
from app.ingest.schemas import Rejection, RejectReason
from app.metrics.catalog import METRIC_NAMES
from app.series import sinks
from app.series.writes import StagedRows

MAX_LISTED_REJECTIONS = 100
_COLUMNS = ("gpu_id", "sampled_at", "received_at", *METRIC_NAMES)


@dataclass
class SamplePlan:
    """The samples of a batch sorted out: rows to store, and what the answer says of the rest."""

    received: int
    staged: StagedRows
    rows: dict[tuple[int, datetime], tuple[Any, ...]] = field(default_factory=dict)
    nulled_by_row: dict[tuple[int, datetime], Any] = field(default_factory=dict)
    duplicates: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    rejections: list[Rejection] = field(default_factory=list)
    nulled: Counter[str] = field(default_factory=Counter)


def plan_samples(
    *,
    gpus: dict[str, Gpu],
    samples: list[SampleRow],
    received_at: datetime,
    newest_allowed: datetime,
    oldest_allowed: datetime,
) -> SamplePlan:
    """Sort the batch's GPU samples (policies in docs/ingest.md, "Sample policies"): a sample
    repeated in the batch is a duplicate (the first is kept); implausible values are counted
    for the samples kept."""
    rows: dict[tuple[int, datetime], tuple[Any, ...]] = {}
    plan = SamplePlan(
        received=len(samples),
        staged=sinks.staged(sinks.SAMPLES, _COLUMNS, rows.values()),
        rows=rows,
    )
    ids = {uuid: gpu.id for uuid, gpu in gpus.items()}
    for index, (uuid, sampled_at, values, nulled_names) in enumerate(samples):
        gpu_id = ids.get(uuid)
        reason: RejectReason | None = None
        if gpu_id is None:
            reason = "unknown_gpu"
        elif sampled_at > newest_allowed:
            reason = "sampled_at_in_future"
        elif sampled_at < oldest_allowed:
            reason = "older_than_retention"
        if reason is not None or gpu_id is None:
            reason = reason or "unknown_gpu"
            plan.rejected[reason] += 1
            if len(plan.rejections) < MAX_LISTED_REJECTIONS:
                plan.rejections.append(Rejection(index=index, gpu_uuid=uuid, reason=reason))
            continue
        key = (gpu_id, sampled_at)
        if key in rows:
            plan.duplicates += 1
            continue
        rows[key] = (gpu_id, sampled_at, received_at, *values)
        if nulled_names:
            plan.nulled.update(nulled_names)
            plan.nulled_by_row[key] = nulled_names
    return plan


def drop_packed(plan: SamplePlan, packed: Collection[tuple[int, datetime]]) -> None:
    """Count as duplicates the planned samples of ``packed``, the keys already stored in packed
    blocks (:func:`app.series.sinks.packed`): re-sent after their hour was compacted."""
    for key in packed:
        del plan.rows[key]
        plan.duplicates += 1
        plan.nulled.subtract(plan.nulled_by_row.get(key, ()))
    plan.nulled = +plan.nulled  # drop names whose count fell to 0


def samples_result(plan: SamplePlan, *, gpus: dict[str, Gpu]) -> dict[str, Any]:
    """The ``samples_*``, ``rejected_by_reason`` and ``rejections`` counts of the answer once
    ``plan.staged`` is stored; moves each GPU's ``last_sample_at`` to its newest stored sample
    and its ``implausible`` to that sample's dropped metrics."""
    staged = plan.staged
    for gpu in gpus.values():
        at = staged.newest.get(gpu.id)
        if at is not None and (gpu.last_sample_at is None or at > gpu.last_sample_at):
            gpu.last_sample_at = at
            dropped = plan.nulled_by_row.get((gpu.id, at), ())
            stamp = at.isoformat()
            gpu.implausible = {name: stamp for name in dropped} or None
    return {
        "samples_received": plan.received,
        "samples_stored": staged.inserted,
        "samples_duplicate": plan.duplicates + len(staged.rows) - staged.inserted,
        "samples_rejected": sum(plan.rejected.values()),
        "rejected_by_reason": dict(plan.rejected),
        "rejections": plan.rejections,
    }
