"""Step 3 of the delivery worker: each part's outcome recorded on the rows it carried.

A part accepted → its rows ``delivered``. A part refused for good → its rows ``failed``. A part
that failed retryably, and the parts not sent after it (held back by the destination's pace or
hold, or behind an earlier failed part), wait for one retry time of the whole message: the
exponential backoff with full jitter of the most-tried row (AWS Architecture Blog, "Exponential
Backoff And Jitter"), never sooner than ``Retry-After`` or the destination's hold. A part not
sent does not count as an attempt. When that time falls after a row's deadline, one last
attempt is made ``last_try_margin_s`` before the deadline (unless the service asked to wait
past it); after that the row is ``failed`` ("gave up at the deadline after N attempts: …").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from app.exporter import counters
from app.notify.channels.base import Outcome
from app.notify.models import NotifyDelivery
from app.notify.sender import PartResult, SendResult


@dataclass
class TickReport:
    """What one tick did (row counts)."""

    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    suppressed: int = 0
    messages: int = 0
    errors: list[str] = field(default_factory=list)


def count_outcomes(report: TickReport, *, since: TickReport | None = None) -> None:
    """Add the delivery outcomes ``report`` holds beyond ``since`` (None: all of them) to
    ``fleetwatch_notifications_total``; called once their transaction committed."""
    base = since or TickReport()
    counters.notifications(
        delivered=report.delivered - base.delivered,
        retried=report.retried - base.retried,
        failed=report.failed - base.failed,
        suppressed=report.suppressed - base.suppressed,
    )


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff ``base_s``/``cap_s`` (seconds), the last attempt's margin before the deadline,
    and ``rng`` drawing the jitter in [0, 1)."""

    base_s: float
    cap_s: float
    last_try_margin_s: float
    rng: Callable[[], float]


def backoff_s(attempts: int, *, base_s: float, cap_s: float, rng: Callable[[], float]) -> float:
    """Full jitter: uniform in [0, min(cap, base · 2^(attempts−1))] seconds."""
    return rng() * min(cap_s, base_s * 2 ** max(0, attempts - 1))


def retry_time(
    result: SendResult, rows: Sequence[NotifyDelivery], *, now: datetime, policy: RetryPolicy
) -> tuple[datetime, datetime | None]:
    """``(when the message's waiting rows are tried again, the earliest time the service
    allows)``: one time for the whole message, so its rows are claimed together again."""
    failure = next((p.outcome for p in result.parts if p.outcome and not p.outcome.ok), None)
    failure = failure or (result.outcome if not result.parts else None)
    holds = [p.held_until for p in result.parts if p.held_until is not None]
    floor = max(holds, default=None)
    delay = 0.0
    if failure is not None and failure.retryable:
        attempts = max((r.attempts for r in rows), default=1)
        delay = backoff_s(attempts, base_s=policy.base_s, cap_s=policy.cap_s, rng=policy.rng)
        if failure.retry_after_s is not None:
            wait = now + timedelta(seconds=failure.retry_after_s)
            floor = max(floor, wait) if floor else wait
            delay = max(delay, failure.retry_after_s)
    at = now + timedelta(seconds=delay)
    return (max(at, floor) if floor else at), floor


def next_try(
    row: NotifyDelivery, at: datetime, floor: datetime | None, *, now: datetime, margin_s: float
) -> datetime | None:
    """``at`` when inside the row's deadline; else the last attempt ``margin_s`` before the
    deadline when that is still ahead and the service allows it; else ``None`` (give up)."""
    if at <= row.deadline_at:
        return at
    last = row.deadline_at - timedelta(seconds=margin_s)
    if now < last and (floor is None or floor <= last):
        return last
    return None


def record_rows(
    by_id: dict[int, NotifyDelivery],
    row_ids: Sequence[int],
    claimed: set[int],
    result: SendResult,
    *,
    now: datetime,
    policy: RetryPolicy,
    report: TickReport,
) -> None:
    """Write ``result`` onto the claimed rows (``row_ids[i]`` carried notice ``i``)."""
    mine = [by_id[i] for i in row_ids if i in claimed and i in by_id]
    at, floor = retry_time(result, mine, now=now, policy=policy)
    common: dict[str, Any] = {
        "leased_until": None,
        "last_status_code": result.status_code,
        "latency_ms": round(result.latency_ms, 1),
    }
    parts: Sequence[PartResult | None] = result.parts or [None]
    for part in parts:
        covers = part.covers if part is not None else range(len(row_ids))
        for index in covers:
            row = by_id.get(row_ids[index])
            if row is None or row.id not in claimed:
                continue
            for key, value in common.items():
                setattr(row, key, value)
            row.truncated = result.truncated
            if part is not None:
                row.part, row.parts = part.part, part.parts
                if part.status_code is not None:
                    row.last_status_code = part.status_code
                    row.latency_ms = round(part.latency_ms, 1)
            outcome = result.outcome if part is None else part.outcome
            why = "held back: the destination is rate-limited"
            if part is not None and part.held_until is None:
                why = "waiting for an earlier part of the message"
            _apply(row, outcome, at, floor, why, now=now, policy=policy, report=report)


def _apply(
    row: NotifyDelivery,
    outcome: Outcome | None,
    at: datetime,
    floor: datetime | None,
    why: str,
    *,
    now: datetime,
    policy: RetryPolicy,
    report: TickReport,
) -> None:
    if outcome is not None and outcome.ok:
        row.status, row.delivered_at, row.last_error = "delivered", now, None
        report.delivered += 1
        return
    if outcome is None:
        row.attempts = max(0, row.attempts - 1)  # not sent: not an attempt
        retryable, detail = True, f"not sent: {why}"
        row.last_error = detail
    else:
        retryable, detail = outcome.retryable, outcome.detail
        row.last_error = detail
    when = next_try(row, at, floor, now=now, margin_s=policy.last_try_margin_s)
    if retryable and when is not None:
        row.not_before = when
        report.retried += 1
        return
    row.status = "failed"
    if retryable:
        row.last_error = f"gave up at the deadline after {row.attempts} attempts: {detail}"
    report.failed += 1
