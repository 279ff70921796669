"""The scheduled rollup job, the one-shot rebuild, and rollup retention.

Which buckets a run recomputes (every recomputation is idempotent, see
:mod:`app.series.rollups.fold`):

* ``gpu_sample`` has ``received_at`` (server time of arrival), so it is folded by **watermark**:
  the minutes of every row that arrived after the stored watermark are recomputed, however old
  their ``sampled_at`` — an agent replaying its spool after a day offline gets its day rolled
  up. The new watermark stays :data:`SETTLE_S` behind the clock: an ingest transaction that
  stamped ``received_at`` earlier but committed later is still seen next run (those rows are
  folded twice, which changes nothing).
* ``disk_sample``, ``nfs_sample`` and ``nic_port_sample`` have no arrival time, so each run
  recomputes the **last N buckets**: every minute from ``now − rollup_lookback_s`` on. Samples
  arriving later than that (a long spool replay) reach the rollups with
  ``fleetwatch rollups rebuild --since``.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import BigInteger, CursorResult, delete, func, select, text
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session, sessionmaker

from app.db import epoch_s, session_scope, utcnow
from app.series import minute_blocks
from app.series.blocks import BY_NAME as BLOCK_FORMS
from app.series.blocks import block_end
from app.series.rollups import fold
from app.series.rollups.models import rollup_watermark
from app.series.rollups.specs import SPECS, Spec, get_mark

log = logging.getLogger(__name__)

#: How far behind the clock the arrival watermark stays, seconds (longer than any ingest
#: transaction takes between stamping ``received_at`` and committing).
SETTLE_S = 60.0
#: Owners beyond this many in one run are not listed in SQL: all are recomputed.
MAX_OWNER_LIST = 1000
#: The rebuild folds this much history per transaction.
REBUILD_CHUNK_S = 6 * 3600


def set_mark(session: Session, name: str, at: datetime) -> None:
    """Store ``at`` as the progress mark ``name`` (replacing any)."""
    session.execute(delete(rollup_watermark).where(rollup_watermark.c.name == name))
    session.execute(rollup_watermark.insert().values(name=name, mark_at=at))


def fold_arrivals(
    session: Session, spec: Spec, *, now: datetime, lookback_s: float
) -> tuple[int, int]:
    """Fold the rows of ``spec`` (which must have ``received_at``) that arrived after its
    watermark (no watermark yet: those received in the last ``lookback_s``), then advance the
    watermark to ``min(newest arrival, now − SETTLE_S)``. Returns (minute, hour) buckets
    written.

    Dirty minutes are grouped into runs of consecutive minutes; each run is recomputed for the
    owners that had arrivals in it, so a late replay of one node does not recompute the fleet.
    """
    raw = spec.raw
    since = get_mark(session, spec.arrival_key) or now - timedelta(seconds=lookback_s)
    minute = sql_cast(func.floor(epoch_s(raw.c.sampled_at) / fold.MINUTE_S), BigInteger)
    stmt = (
        select(raw.c[spec.owner], minute, func.max(raw.c.received_at))
        .where(raw.c.received_at > since)
        .group_by(raw.c[spec.owner], minute)
    )
    owners_by_minute: dict[int, set[int]] = defaultdict(set)
    newest: datetime | None = None
    for owner, key, received in session.execute(stmt):
        owners_by_minute[int(key)].add(owner)
        newest = received if newest is None or received > newest else newest
    written = (0, 0)
    for first, last, owners in _runs(owners_by_minute):
        listed = owners if len(owners) <= MAX_OWNER_LIST else None
        done = fold.fold_range(
            session,
            spec,
            lo_s=first * fold.MINUTE_S,
            hi_s=(last + 1) * fold.MINUTE_S,
            owners=listed,
        )
        written = (written[0] + done[0], written[1] + done[1])
    settled = now - timedelta(seconds=SETTLE_S)
    mark = since if newest is None else max(since, min(newest, settled))
    set_mark(session, spec.arrival_key, mark)
    return written


def _runs(owners_by_minute: dict[int, set[int]]) -> list[tuple[int, int, set[int]]]:
    """Consecutive dirty minutes as ``(first, last, owners)`` runs."""
    runs: list[tuple[int, int, set[int]]] = []
    for key in sorted(owners_by_minute):
        if runs and key == runs[-1][1] + 1:
            first, _, owners = runs[-1]
            runs[-1] = (first, key, owners | owners_by_minute[key])
        else:
            runs.append((key, key, set(owners_by_minute[key])))
    return runs


def fold_recent(
    session: Session, spec: Spec, *, now: datetime, lookback_s: float
) -> tuple[int, int]:
    """Recompute every bucket of ``spec`` from ``now − lookback_s`` on (future-dated samples,
    within ingest's tolerance, included). Returns (minute, hour) buckets written."""
    lo = now.timestamp() - lookback_s
    return fold.fold_range(session, spec, lo_s=lo, hi_s=now.timestamp() + 3600)


def _advance_horizon(session: Session, spec: Spec, *, now: datetime, lookback_s: float) -> None:
    """Move the folded-until mark to ``now − SETTLE_S``. With no mark yet, only when the raw
    table holds nothing older than this run folded (a new database): history needs
    ``fleetwatch rollups rebuild`` first, and until then charts read raw rows."""
    if get_mark(session, spec.horizon_key) is None:
        before = now - timedelta(seconds=lookback_s)
        if session.scalar(
            select(spec.raw.c.sampled_at).where(spec.raw.c.sampled_at < before).limit(1)
        ):
            # Compaction reads this to say a rebuild is needed, not another run.
            set_mark(session, rebuild_key(spec.name), now)
            if spec.name not in _WARNED:
                _WARNED.add(spec.name)
                log.warning(
                    "%s has samples older than the rollups: run 'fleetwatch rollups rebuild' "
                    "(charts read raw rows until then)",
                    spec.name,
                )
            return
    set_mark(session, spec.horizon_key, now - timedelta(seconds=SETTLE_S))


_WARNED: set[str] = set()


def rebuild_key(name: str) -> str:
    """The watermark name a rollup run sets when raw table ``name`` holds samples older than
    its rollups (``fleetwatch rollups rebuild`` needed before its folded-until mark)."""
    return f"{name}:needs_rebuild"


def prune_rollups(
    session: Session, *, minute_days: float, hour_days: float, now: datetime
) -> dict[str, int]:
    """Delete 1-minute buckets older than ``minute_days`` (a packed day when all of it is) and
    1-hour buckets and fleet-wide minutes older than ``hour_days``; rows deleted per table."""
    deleted: dict[str, int] = {}
    for spec in SPECS:
        for resolution, days in ((fold.MINUTE_S, minute_days), (fold.HOUR_S, hour_days)):
            table = spec.tables[resolution]
            cutoff = math.floor(now.timestamp() - days * 86400)
            result = cast(
                CursorResult[Any],
                session.execute(delete(table).where(table.c.bucket_start_s < cutoff)),
            )
            deleted[table.name] = int(result.rowcount or 0)
        if spec.fleet is not None:
            # One row per minute for the whole fleet: kept as long as the hours.
            cutoff = math.floor(now.timestamp() - hour_days * 86400)
            result = cast(
                CursorResult[Any],
                session.execute(delete(spec.fleet).where(spec.fleet.c.bucket_start_s < cutoff)),
            )
            deleted[spec.fleet.name] = int(result.rowcount or 0)
    cutoff = math.floor(now.timestamp() - minute_days * 86400)
    for form in minute_blocks.FORMS:
        blocks = form.block
        result = cast(
            CursorResult[Any],
            session.execute(
                delete(blocks).where(blocks.c.block_start_s + minute_blocks.DAY_S <= cutoff)
            ),
        )
        deleted[blocks.name] = int(result.rowcount or 0)
    return deleted


def run_once(
    session: Session,
    *,
    lookback_s: float,
    minute_days: float,
    hour_days: float,
    now: datetime | None = None,
) -> dict[str, tuple[int, int]]:
    """One job run: every raw table folded (:data:`GPU` by arrival, the others by lookback),
    then old rollups pruned. Returns (minute, hour) buckets written per raw table."""
    now = now or utcnow()
    written = {}
    for spec in SPECS:
        if spec.by_arrival:
            written[spec.name] = fold_arrivals(session, spec, now=now, lookback_s=lookback_s)
        else:
            written[spec.name] = fold_recent(session, spec, now=now, lookback_s=lookback_s)
        _advance_horizon(session, spec, now=now, lookback_s=lookback_s)
    prune_rollups(session, minute_days=minute_days, hour_days=hour_days, now=now)
    return written


def rollup_job(
    factory: sessionmaker[Session], lookback_s: float, minute_days: float, hour_days: float
) -> None:
    """Scheduled wrapper: one transaction, errors logged and never raised into the scheduler."""
    try:
        with session_scope(factory) as session:
            run_once(session, lookback_s=lookback_s, minute_days=minute_days, hour_days=hour_days)
    except Exception:
        log.exception("rollup fold failed")


def _stored_span(session: Session, spec: Spec) -> tuple[datetime | None, datetime | None]:
    """The oldest and newest ``sampled_at`` of ``spec``'s samples, raw rows and blocks alike
    (the oldest blocks' first sample; a block counts to its end)."""
    raw = spec.raw
    oldest = session.scalar(select(func.min(raw.c.sampled_at)))
    newest = session.scalar(select(func.max(raw.c.sampled_at)))
    form = BLOCK_FORMS.get(spec.name)
    if form is not None and session.get_bind().dialect.name == "postgresql":
        b = form.block.c
        first, last = session.execute(
            select(func.min(b.block_start), func.max(b.block_start))
        ).one()
        if first is not None:
            # A block's first sample lies its first delta after its start (a day block of rows
            # that retention thinned starts hours after midnight).
            delta_us = session.scalar(
                select(func.min(b.sampled_at_delta_us[1])).where(b.block_start == first)
            )
            first += timedelta(microseconds=int(delta_us or 0))
            # A block counts to its own end: a wide block starting before the last may end
            # after it.
            end = session.scalar(
                select(func.max(block_end(form))).where(
                    b.block_start > last - timedelta(seconds=form.max_block_s)
                )
            ) or last + timedelta(seconds=form.block_s)
            oldest = first if oldest is None else min(oldest, first)
            newest = end if newest is None else max(newest, end)
    return oldest, newest


def rebuild(
    factory: sessionmaker[Session], *, since: datetime | None, now: datetime | None = None
) -> dict[str, tuple[int, int]]:
    """Recompute every rollup bucket from ``since`` (default: the oldest raw sample) to now,
    :data:`REBUILD_CHUNK_S` of history per transaction, then set the folded-until marks (and
    the GPU arrival watermark) to the rebuild's start minus :data:`SETTLE_S`, so charts read
    the rollups and the job goes on from there. Returns (minute, hour) buckets written per raw
    table.

    Rollups outlive raw samples (the raw retention is shorter), and a recomputed bucket is
    replaced by what the raw rows say: so a rebuild never starts before the oldest stored
    sample, and where hour rollups of that sample's hour or older exist (their raw rows may
    have been pruned) it starts at the next whole hour, leaving the partly pruned hour as it
    was folded."""
    began = now or utcnow()
    totals: dict[str, tuple[int, int]] = {}
    for spec in SPECS:
        with session_scope(factory) as session:
            stored_from, newest = _stored_span(session, spec)
            first_bucket = session.scalar(select(func.min(spec.tables[3600].c.bucket_start_s)))
        written = (0, 0)
        if stored_from is not None and newest is not None:
            oldest = stored_from if since is None else max(since, stored_from)
            lo = math.floor(oldest.timestamp() / fold.HOUR_S) * fold.HOUR_S
            stored_s = stored_from.timestamp()
            if first_bucket is not None and first_bucket <= stored_s:
                # The hour of the oldest stored sample may have lost older ones to retention.
                lo = max(lo, math.ceil(stored_s / fold.HOUR_S) * fold.HOUR_S)
            hi = newest.timestamp() + 1
            while lo < hi:
                with session_scope(factory) as session:
                    done = fold.fold_range(
                        session, spec, lo_s=lo, hi_s=min(lo + REBUILD_CHUNK_S, hi)
                    )
                written = (written[0] + done[0], written[1] + done[1])
                lo += REBUILD_CHUNK_S
        totals[spec.name] = written
    with session_scope(factory) as session:
        for spec in SPECS:
            set_mark(session, spec.horizon_key, began - timedelta(seconds=SETTLE_S))
            if spec.by_arrival:
                set_mark(session, spec.arrival_key, began - timedelta(seconds=SETTLE_S))
            # Fresh statistics: a planner that has never seen the bulk-filled rollups scans
            # them whole instead of using the bucket index.
            for table in (*spec.tables.values(), *([spec.fleet] if spec.fleet is not None else [])):
                session.execute(text(f"ANALYZE {table.name}"))
    return totals
