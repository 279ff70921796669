"""The GPU samples of a batch: unknown GPU, future and too-old samples rejected, implausible
values (nulled by :mod:`app.ingest.rows`) counted, duplicates skipped.

:func:`plan_samples` decides everything that needs no database; the rows then go in with the
node sections (:func:`app.series.writes.insert_staged`), and :func:`samples_result` makes the
answer's counts from how many went in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.fleet.gpu_heartbeat import Heartbeat
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
    invalid: Sequence[tuple[int, str]] = (),
) -> SamplePlan:
    """Sort the batch's GPU samples (policies in docs/ingest.md, "Sample policies"): a sample
    repeated in the batch is a duplicate (the first is kept); implausible values are counted
    for the samples kept.

    ``invalid``: the samples left out before (:attr:`app.ingest.salvage.Salvage.samples`: index
    as sent, ``gpu_uuid``), rejected as ``invalid``; ``samples`` are the others, in order, and
    the answer's ``rejections`` name every sample by its index as sent.
    """
    rows: dict[tuple[int, datetime], tuple[Any, ...]] = {}
    plan = SamplePlan(
        received=len(samples) + len(invalid),
        staged=sinks.staged(sinks.SAMPLES, _COLUMNS, rows.values()),
        rows=rows,
    )
    ids = {uuid: gpu.id for uuid, gpu in gpus.items()}
    positions = _positions_as_sent(len(samples), invalid)
    for index, uuid in invalid:
        plan.rejected["invalid"] += 1
        if len(plan.rejections) < MAX_LISTED_REJECTIONS:
            plan.rejections.append(Rejection(index=index, gpu_uuid=uuid, reason="invalid"))
    for index, (uuid, sampled_at, values, nulled_names) in zip(positions, samples, strict=True):
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


def _positions_as_sent(kept: int, left_out: Sequence[tuple[int, str]]) -> range | list[int]:
    """The index as sent of each of ``kept`` samples, the others (``left_out``) taken out."""
    if not left_out:
        return range(kept)
    gone = {index for index, _ in left_out}
    return [i for i in range(kept + len(left_out)) if i not in gone]


def newest_stored(plan: SamplePlan, *, gpus: dict[str, Gpu]) -> dict[int, Heartbeat]:
    """Once ``plan.staged`` is stored: by GPU id, the move of each GPU whose newest stored
    sample is newer than its ``last_sample_at`` (that sample's time, and its metrics dropped
    as implausible: name → ISO time, ``None`` where none was)."""
    staged = plan.staged
    moved: dict[int, Heartbeat] = {}
    for gpu in gpus.values():
        at = staged.newest.get(gpu.id)
        if at is not None and (gpu.last_sample_at is None or at > gpu.last_sample_at):
            dropped = plan.nulled_by_row.get((gpu.id, at), ())
            stamp = at.isoformat()
            moved[gpu.id] = Heartbeat(
                gpu, sampled_at=at, implausible={name: stamp for name in dropped} or None
            )
    return moved


def drop_packed(plan: SamplePlan, packed: Collection[tuple[int, datetime]]) -> None:
    """Count as duplicates the planned samples of ``packed``, the keys already stored in packed
    blocks (:func:`app.series.sinks.packed`): re-sent after their hour was compacted."""
    for key in packed:
        del plan.rows[key]
        plan.duplicates += 1
        plan.nulled.subtract(plan.nulled_by_row.get(key, ()))
    plan.nulled = +plan.nulled  # drop names whose count fell to 0


def samples_result(plan: SamplePlan) -> dict[str, Any]:
    """The ``samples_*``, ``rejected_by_reason`` and ``rejections`` counts of the answer once
    ``plan.staged`` is stored."""
    staged = plan.staged
    return {
        "samples_received": plan.received,
        "samples_stored": staged.inserted,
        "samples_duplicate": plan.duplicates + len(staged.rows) - staged.inserted,
        "samples_rejected": sum(plan.rejected.values()),
        "rejected_by_reason": dict(plan.rejected),
        "rejections": sorted(plan.rejections, key=lambda r: r.index)[:MAX_LISTED_REJECTIONS],
    }
