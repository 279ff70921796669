"""Compaction: raw sample rows older than the horizon become blocks (:mod:`app.series.blocks`:
hours; 6 hours for a GPU sampled 30 s apart or more), in SQL on the server, a batch of owners per
transaction.

Two statements per batch, each atomic on its own, so an ingest running beside them never loses
a row:

1. **re-open**: a block that has raw rows again (a late or replayed sample of a span already
   compacted) is deleted and its samples go back into the raw table. A sample both in the block
   and raw (a duplicate that arrived after compaction) keeps the block's value: the first stored
   wins, as at ingest.
2. **pack**: raw rows older than the horizon, in no block, are deleted and inserted as blocks
   (a GPU's 6-hour block once its whole span is older) — ``DELETE … RETURNING`` feeding the
   ``INSERT`` in one statement, so exactly the rows deleted are packed.

Rows stay raw while any reader needs them as rows: the newest ``keep_latest_s`` of each owner
(the latest values and "latest per key" reads), and on ``gpu_sample`` rows that arrived after
the rollups' arrival watermark (not folded yet). Postgres only; on SQLite nothing is compacted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope, utcnow
from app.fleet.models import Gpu, Node
from app.series import minute_blocks
from app.series.blocks import (
    BLOCK_ORIGIN,
    BLOCK_S,
    SPECS,
    WIDE_SPACING_S,
    BlockSpec,
    end_sql,
    exact_steps_sql,
    step_sql,
    stepped_value_sql,
    steps_column,
)
from app.series.rollups import specs as rollup_specs
from app.series.rollups.jobs import rebuild_key
from app.series.writes import LATEST_WINDOW_S

log = logging.getLogger(__name__)

#: Owners (GPUs) per transaction: bounds the rows one statement moves (1 h of 5-s samples ×
#: 128 GPUs ≈ 92 k GPU rows, 1.7 M NVLink rows on HGX).
OWNERS_PER_BATCH = 128
#: Nodes per transaction for the host tables: a day of 60-s readings of an HGX node's 8 IB
#: ports is 11,520 rows, × 32 nodes ≈ 370 k rows per statement.
NODES_PER_BATCH = 32


#: Why a table was not compacted: the rollups have not run yet.
NOT_RUN = (
    "waits for the rollups' first run (the rollup job of 'fleetwatch serve' or "
    "'fleetwatch worker', every minute)"
)
#: Why a table was not compacted: raw rows older than the rollups' first run are stored.
NEEDS_REBUILD = (
    "waits for the rollups to cover its older raw rows: run 'fleetwatch rollups rebuild'"
)


@dataclass
class CompactResult:
    """What one compaction pass did, per raw table: rows packed into blocks, blocks written
    and blocks re-opened for late rows; ``waiting``: tables skipped, each with why and what to
    do (:data:`NOT_RUN` before the rollups' first run, :data:`NEEDS_REBUILD` when the rollups run
    but the raw rows reach back before them)."""

    rows_packed: dict[str, int] = field(default_factory=dict)
    blocks_written: dict[str, int] = field(default_factory=dict)
    blocks_reopened: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)

    def add(self, table: str, packed: int, written: int, reopened: int) -> None:
        """Count one batch of ``table``."""
        self.rows_packed[table] = self.rows_packed.get(table, 0) + packed
        self.blocks_written[table] = self.blocks_written.get(table, 0) + written
        self.blocks_reopened[table] = self.blocks_reopened.get(table, 0) + reopened


def _q(name: str) -> str:
    return f'"{name}"'


def _bin(column: str, block_s: int) -> str:
    return f"date_bin('{block_s} seconds', {column}, TIMESTAMPTZ '{BLOCK_ORIGIN}')"


def reopen_sql(spec: BlockSpec) -> str:
    """Statement 1 for ``spec``: blocks of ``:owners`` with raw rows before ``:horizon`` in
    their span go back to raw rows (block values win on conflict); selects (blocks re-opened,
    rows restored). Raw rows that :func:`pack_sql` keeps raw anyway (the owner's newest
    ``:keep_s``) do not re-open a block: the newest minutes of a node gone silent inside a
    packed day would re-open and re-pack that day at every run."""
    keys = spec.keys
    raw, block = _q(spec.raw.name), _q(spec.block.name)
    same_key = " AND ".join(f"r.{_q(k)} = b.{_q(k)}" for k in keys)
    stored = ("sampled_at_delta_us", *spec.values, *(steps_column(c) for c, _ in spec.stepped))
    arrays = ", ".join(f"o.{_q(c)}" for c in stored)
    alias = ", ".join(_q(c) for c in ("dt_us", *stored[1:]))
    scales = dict(spec.stepped)
    unpacked = ", ".join(
        f"d.{_q(c)}"
        if c not in scales
        else f"{stepped_value_sql(f'd.{_q(c)}', f'd.{_q(steps_column(c))}', scales[c], 'd.ord')}"
        f" AS {_q(c)}"
        for c in spec.values
    )
    arrival_col = ', "received_at"' if spec.arrival else ""
    arrival_val = ", o.received_until" if spec.arrival else ""
    # Rows the rollups have not folded yet are not packed either: re-opening for them would
    # only re-pack the same block at every run until they are.
    folded = " AND r.received_at <= :folded" if spec.arrival else ""
    updates = ", ".join(
        f"{_q(c)} = excluded.{_q(c)}" for c in (*spec.values, *(["received_at"] * spec.arrival))
    )
    owner = _q(spec.owner)
    return f"""
WITH newest AS MATERIALIZED (
    SELECT o.id AS owner,
           (SELECT max(n.sampled_at) FROM {raw} n WHERE n.{owner} = o.id) AS newest_at
    FROM unnest(CAST(:owners AS integer[])) AS o(id)
), opened AS (
    DELETE FROM {block} b
    USING newest
    WHERE b.{owner} = newest.owner
      AND EXISTS (
        SELECT 1 FROM {raw} r
        WHERE {same_key}
          AND r.sampled_at >= b.block_start
          AND r.sampled_at < {end_sql(spec, "b")}
          AND r.sampled_at < :horizon
          AND r.sampled_at < newest.newest_at - make_interval(secs => :keep_s){folded})
    RETURNING b.*
), restored AS (
INSERT INTO {raw} ({", ".join(_q(k) for k in keys)}, "sampled_at"{arrival_col},
    {", ".join(_q(c) for c in spec.values)})
SELECT {", ".join(f"o.{_q(k)}" for k in keys)},
    o.block_start + u.offset_us * interval '1 microsecond'{arrival_val},
    {", ".join(f"u.{_q(c)}" for c in spec.values)}
FROM opened o, LATERAL (
    SELECT sum(d.dt_us) OVER (ORDER BY d.ord) AS offset_us,
        {unpacked}
    FROM unnest({arrays}) WITH ORDINALITY AS d({alias}, ord)) u
ON CONFLICT ({", ".join(_q(k) for k in keys)}, "sampled_at") DO UPDATE SET {updates}
RETURNING 1
)
SELECT (SELECT count(*) FROM opened), (SELECT count(*) FROM restored)
"""


def pack_sql(spec: BlockSpec) -> str:
    """Statement 2 for ``spec``: raw rows of ``:owners`` before ``:horizon`` (and before their
    owner's newest row minus ``:keep_s``; on ``gpu_sample`` received by ``:folded``), in no
    block, deleted and inserted as blocks.

    With :attr:`~app.series.blocks.BlockSpec.wide_s` the width is chosen per series and wide
    span (6 hours, aligned on the same origin) from the rows to pack in it: wide when their
    median spacing is :data:`~app.series.blocks.WIDE_SPACING_S` or more (or there is one row),
    and then only once the whole span is before ``:horizon``; hour blocks (``block_s`` NULL)
    otherwise, and always in a span that has hour blocks already (a series switching from fast
    to slow sampling inside a span), so that blocks never overlap and a run after a run packs
    nothing."""
    keys = spec.keys
    raw, block = _q(spec.raw.name), _q(spec.block.name)
    owner = _q(spec.owner)
    same_key = " AND ".join(f"b.{_q(k)} = r.{_q(k)}" for k in keys)
    folded = " AND r.received_at <= :folded" if spec.arrival else ""
    arrival_col = ', "received_until"' if spec.arrival else ""
    arrival_val = ", max(m.received_at)" if spec.arrival else ""
    by_series = ", ".join(f"m.{_q(k)}" for k in keys)
    narrow_of_r = _bin("r.sampled_at", spec.block_s)
    if spec.wide_s is None:
        covered = f"b.block_start = {narrow_of_r}"
    else:
        # Blocks are aligned on their widths: the one holding a time starts at its bin of one
        # of them (two primary-key probes).
        bins = ", ".join(_bin("r.sampled_at", w) for w in spec.widths)
        covered = f"b.block_start IN ({bins}) AND r.sampled_at < {end_sql(spec, 'b')}"
    eligible = f"""r.{owner} = newest.owner
      AND r.sampled_at < :horizon
      AND r.sampled_at < newest.newest_at - make_interval(secs => :keep_s){folded}
      AND NOT EXISTS (SELECT 1 FROM {block} b WHERE {same_key} AND {covered})"""
    window = f"PARTITION BY {by_series}, m.block_start ORDER BY m.sampled_at"
    scales = dict(spec.stepped)
    aggregates = ", ".join(
        [f"array_agg(m.{_q(c)} ORDER BY m.sampled_at)" for c in ("dt_us",)]
        + [_aggregate(c, scales.get(c)) for c in spec.values]
        + [_steps_aggregate(c, scale) for c, scale in spec.stepped]
    )
    steps = "".join(
        f",\n        {step_sql(f'm.{_q(c)}', scale, window)} AS {_q(steps_column(c))}"
        for c, scale in spec.stepped
    )
    stepped_cols = "".join(f", {_q(steps_column(c))}" for c, _ in spec.stepped)
    width_col = ', "block_s"' if spec.wide_s is not None else ""
    width_val = ", m.block_s" if spec.wide_s is not None else ""
    return f"""
WITH newest AS (
    SELECT o.id AS owner,
           (SELECT max(n.sampled_at) FROM {raw} n WHERE n.{owner} = o.id) AS newest_at
    FROM unnest(CAST(:owners AS integer[])) AS o(id)
), {_moved_sql(spec, eligible)}, stepped AS (
    SELECT m.*,
        CAST(EXTRACT(EPOCH FROM m.sampled_at - coalesce(
            lag(m.sampled_at) OVER ({window}), m.block_start)) * 1000000 AS bigint) AS dt_us{steps}
    FROM moved m
), written AS (
    INSERT INTO {block} ({", ".join(_q(k) for k in keys)}, "block_start", "sample_count"
        {arrival_col}{width_col}, "sampled_at_delta_us", {", ".join(_q(c) for c in spec.values)}
        {stepped_cols})
    SELECT {by_series}, m.block_start, count(*)
        {arrival_val}{width_val}, {aggregates}
    FROM stepped m
    GROUP BY {by_series}, m.block_start{width_val}
    RETURNING sample_count
)
SELECT count(*), coalesce(sum(sample_count), 0) FROM written
"""


def _moved_sql(spec: BlockSpec, eligible: str) -> str:
    """The ``moved`` CTE of :func:`pack_sql` (with those it needs before it): the raw rows
    deleted, with their block's ``block_start`` (and ``block_s`` where widths vary)."""
    raw, block = _q(spec.raw.name), _q(spec.block.name)
    narrow_of_r = _bin("r.sampled_at", spec.block_s)
    if spec.wide_s is None:
        return f"""moved AS (
    DELETE FROM {raw} r
    USING newest
    WHERE {eligible}
    RETURNING r.*, {narrow_of_r} AS block_start
)"""
    wide = spec.wide_s
    wide_of_r = _bin("r.sampled_at", wide)
    r_keys = ", ".join(f"r.{_q(k)}" for k in spec.keys)
    c_keys = ", ".join(f"c.{_q(k)}" for k in spec.keys)
    b_is_c = " AND ".join(f"b.{_q(k)} = c.{_q(k)}" for k in spec.keys)
    s_is_r = " AND ".join(f"s.{_q(k)} = r.{_q(k)}" for k in spec.keys)
    return f"""candidates AS MATERIALIZED (
    SELECT {r_keys}, {wide_of_r} AS wide_start,
        r.sampled_at - lag(r.sampled_at) OVER (
            PARTITION BY {r_keys}, {wide_of_r} ORDER BY r.sampled_at) AS gap
    FROM {raw} r, newest
    WHERE {eligible}
), spans AS (
    SELECT {c_keys}, c.wide_start,
        CASE WHEN EXISTS (
                SELECT 1 FROM {block} b
                WHERE {b_is_c} AND b.block_s IS NULL
                  AND b.block_start >= c.wide_start
                  AND b.block_start < c.wide_start + interval '{wide} seconds')
            THEN NULL
            WHEN coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY c.gap)
                >= interval '{WIDE_SPACING_S} seconds', true)
            THEN {wide}
        END AS block_s
    FROM candidates c
    GROUP BY {c_keys}, c.wide_start
), chosen AS (
    SELECT * FROM spans s
    WHERE s.block_s IS NULL OR s.wide_start + interval '{wide} seconds' <= :horizon
), moved AS (
    DELETE FROM {raw} r
    USING newest, chosen s
    WHERE {eligible}
      AND {s_is_r} AND s.wide_start = {wide_of_r}
    RETURNING r.*,
        CASE WHEN s.block_s IS NULL THEN {narrow_of_r} ELSE s.wide_start END AS block_start,
        s.block_s AS block_s
)"""


def _aggregate(column: str, scale: int | None) -> str:
    """A block's array of ``column``; for a stepped column NULL where the block is stepped."""
    values = f"array_agg(m.{_q(column)} ORDER BY m.sampled_at)"
    if scale is None:
        return values
    exact = exact_steps_sql(f"m.{_q(column)}", scale)
    return f"CASE WHEN bool_and({exact}) THEN NULL ELSE {values} END"


def _steps_aggregate(column: str, scale: int) -> str:
    """A block's array of ``column``'s steps, NULL where the block keeps the doubles."""
    steps = f"array_agg(m.{_q(steps_column(column))} ORDER BY m.sampled_at)"
    return f"CASE WHEN bool_and({exact_steps_sql(f'm.{_q(column)}', scale)}) THEN {steps} END"


def compact_owners(
    session: Session,
    spec: BlockSpec,
    *,
    owners: Sequence[int],
    horizon: datetime,
    keep_latest_s: float = LATEST_WINDOW_S,
    folded: datetime | None = None,
) -> tuple[int, int, int]:
    """Compact ``spec``'s rows of ``owners`` older than ``horizon`` and than the owner's newest
    row minus ``keep_latest_s`` (one batch, flushed, not committed). ``folded`` is required
    for a table with arrival times (rows that arrived later stay raw).

    Returns:
        (rows packed, blocks written, blocks re-opened).
    """
    params: dict[str, Any] = {"owners": list(owners), "horizon": horizon, "keep_s": keep_latest_s}
    if spec.arrival:
        if folded is None:
            raise ValueError(f"{spec.name}: folded (the rollups' arrival watermark) is required")
        params.update(folded=folded)
    n_reopened, _restored = session.execute(text(reopen_sql(spec)), params).one()
    written, packed = session.execute(text(pack_sql(spec)), params).one()
    return int(packed), int(written), int(n_reopened)


def block_floor(at: datetime, block_s: int = BLOCK_S) -> datetime:
    """``at`` rounded down to a block boundary, so that only whole blocks are packed (a
    horizon inside a block would re-open that block at every run)."""
    seconds = at.timestamp()
    return datetime.fromtimestamp(seconds - seconds % block_s, UTC)


def compact(
    factory: sessionmaker[Session],
    *,
    compact_after_s: float,
    raw_s: dict[str, float] | None = None,
    now: datetime | None = None,
    specs: Sequence[BlockSpec] = SPECS,
    minutes_after_s: float | None = 7 * 86400.0,
    host_minutes_after_s: float | None = None,
) -> CompactResult:
    """Compact every table of ``specs``, :data:`OWNERS_PER_BATCH` GPUs (or
    :data:`NODES_PER_BATCH` nodes) per transaction, rows older than ``now - compact_after_s`` —
    for a table named in ``raw_s`` older than ``now - max(compact_after_s, raw_s[name])`` and
    than its owner's newest row minus that span (the spans readers scan as raw rows, see
    :mod:`app.series.jobs`). Resumable: whatever a stopped run left raw is taken by the next.
    The 1-minute rollups (GPU, disk, NFS, IB port) of whole days older than
    ``minutes_after_s`` (and than the rollups' folded-until mark) are packed too
    (:mod:`app.series.minute_blocks`; ``None``: not), reported as ``<raw>_1m``: charts of the
    recent days read minute rows, which is faster than unpacking. The host tables' minutes
    (disk, NFS, IB port) are packed after ``host_minutes_after_s`` (default: as the GPU's): a
    day is enough for the storage page's 24-h range never to unpack them, and longer ranges
    rank by the hour rollups and read the minutes of their top series only. On SQLite returns
    an empty result.
    """
    result = CompactResult()
    at = now or utcnow()
    with session_scope(factory) as session:
        if session.get_bind().dialect.name != "postgresql":
            return result
        gpu_ids = list(session.scalars(select(Gpu.id).order_by(Gpu.id)))
        node_ids = list(session.scalars(select(Node.id).order_by(Node.id)))
        folded = rollup_specs.get_mark(session, rollup_specs.GPU.arrival_key)
    spans = raw_s or {}
    for spec in specs:
        span_s = spans.get(spec.name, 0.0)
        after_s = max(compact_after_s, span_s)
        horizon = block_floor(at - timedelta(seconds=after_s), spec.block_s)
        # Readers look back from each owner's newest row (rule windows end at the node's
        # newest sample, a port down is dated within the event window before its newest
        # reading): a node gone silent keeps that much raw too, not only a live one.
        keep_s = max(LATEST_WINDOW_S, span_s)
        if spec.arrival and folded is None:
            log.info("compaction: %s %s", spec.name, NOT_RUN)
            result.waiting[spec.name] = NOT_RUN
            continue
        by_node = spec.owner == "node_id"
        owners = node_ids if by_node else gpu_ids
        step = NODES_PER_BATCH if by_node else OWNERS_PER_BATCH
        for i in range(0, len(owners), step):
            batch = owners[i : i + step]
            with session_scope(factory) as session:
                packed, written, reopened = compact_owners(
                    session,
                    spec,
                    owners=batch,
                    horizon=horizon,
                    keep_latest_s=keep_s,
                    folded=folded,
                )
            result.add(spec.name, packed, written, reopened)
    if minutes_after_s is not None:
        by_owner: dict[str, Sequence[int]] = {"gpu_id": gpu_ids, "node_id": node_ids}
        host_after_s = minutes_after_s if host_minutes_after_s is None else host_minutes_after_s
        after = {"gpu_id": minutes_after_s, "node_id": host_after_s}
        _pack_minutes(factory, result, by_owner, at, after)
    return result


def _pack_minutes(
    factory: sessionmaker[Session],
    result: CompactResult,
    owners: dict[str, Sequence[int]],
    at: datetime,
    after_s: dict[str, float],
) -> None:
    """Pack the 1-minute rollups of every :data:`~app.series.minute_blocks.FORMS`,
    :data:`~app.series.minute_blocks.OWNERS_PER_BATCH` owners per transaction (``owners`` and
    ``after_s`` by owner column), each up to its rollups' folded-until mark."""
    for form in minute_blocks.FORMS:
        name = form.minutes.name
        spec = rollup_specs.BY_RAW[name.removesuffix("_1m")]
        ran = False
        with session_scope(factory) as session:
            folded_until = rollup_specs.get_mark(session, spec.horizon_key)
            if folded_until is None:
                # The folded-until mark is set by the rollups' first run, unless raw rows older
                # than that run are stored (history, an upgrade): they need a rebuild first.
                ran = rollup_specs.get_mark(session, rebuild_key(spec.name)) is not None
        if folded_until is None:
            reason = NEEDS_REBUILD if ran else NOT_RUN
            log.info("compaction: %s %s", name, reason)
            result.waiting[name] = reason
            continue
        oldest = at - timedelta(seconds=after_s[form.owner])
        horizon_s = int(min(oldest, folded_until).timestamp())
        ids = owners[form.owner]
        step = minute_blocks.OWNERS_PER_BATCH
        for i in range(0, len(ids), step):
            with session_scope(factory) as session:
                written, packed = minute_blocks.pack(
                    session, owners=ids[i : i + step], horizon_s=horizon_s, form=form
                )
            result.add(name, packed, written, 0)
