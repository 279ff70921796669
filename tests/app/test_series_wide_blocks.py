"""GPU blocks of slowly sampled series (:data:`app.series.blocks.WIDE_BLOCK_S`, 6 hours):
samples 60 s apart packed into 6-hour blocks read back exactly (rows, charts over a range
starting inside a block, rollups rebuilt from them, energy as steps), a series switching from
10-s to 60-s samples inside a span (no overlap, no loss, nothing packed twice), late and
duplicate samples re-opening a wide block, retention of wide blocks, a re-sent sample of a
packed span, and the downgrade of revision 0036."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.migrate import alembic_config
from app.retention.jobs import prune
from app.series.blocks import WIDE_BLOCK_S, gpu_sample_block
from app.series.compact import CompactResult, compact
from app.series.read import rows_between
from app.series.rollups import fold
from app.series.rollups.jobs import rebuild, set_mark
from app.series.rollups.models import GPU_ROLLUPS
from app.series.rollups.specs import GPU
from app.series.tables import gpu_sample
from tests.app.series_helpers import store_factory
from tests.dbs import postgres_database
from tests.factories import batch, sample, store_payload

D0 = datetime(2026, 11, 28, tzinfo=UTC)  # a UTC midnight: blocks align on the epoch
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
WIDE = timedelta(seconds=WIDE_BLOCK_S)
assert WIDE == 6 * HOUR  # the spans below
BIG = 2**53 + 1
COLUMNS = ["util_gpu_pct", "power_w", "temp_c", "ecc_corrected_aggregate_count", "energy_j"]


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    with store_factory(postgres_url) as made:
        yield made


def values_at(k: int, gpu: int) -> dict[str, Any]:
    """Sample ``k``'s values: gauges with decimals, NULL gaps, a counter past 2**53 and an
    energy counter in whole millijoules (stored as steps)."""
    return {
        "util_gpu_pct": float((k * 7 + gpu) % 101),
        "power_w": 70.93 + (k % 13) * 0.01,
        "temp_c": None if k % 17 == 0 else 30.0 + k % 5,
        "ecc_corrected_aggregate_count": BIG + k // 100,
        "energy_j": (379_578_661_560 + k * 6_013_263 + (k * 104_729) % 997) / 1000,
    }


def make_node(session: Session, gpus: int = 2) -> Node:
    node = Node(hostname="wide-a", labels={}, created_at=D0)
    session.add(node)
    session.flush()
    for i in range(gpus):
        session.add(
            Gpu(node_id=node.id, uuid=f"GPU-w{i}", index=i, first_seen_at=D0, last_seen_at=D0)
        )
    session.flush()
    session.refresh(node)
    return node


def seed(session: Session, node: Node, spans: list[tuple[datetime, datetime, int]]) -> None:
    """Samples of every GPU of ``node`` every ``step_s`` in each ``[start, end)`` of
    ``spans``, numbered on from one span to the next."""
    rows = []
    for gpu in node.gpus:
        k = 0
        for start, end, step_s in spans:
            at = start
            while at < end:
                rows.append(
                    {"gpu_id": gpu.id, "sampled_at": at, "received_at": at}
                    | values_at(k, gpu.index)
                )
                at += timedelta(seconds=step_s)
                k += 1
        gpu.last_sample_at = rows[-1]["sampled_at"]
    session.execute(gpu_sample.insert(), rows)


def every_row(session: Session) -> list[tuple[Any, ...]]:
    rows = rows_between("gpu_sample", columns=COLUMNS, start=None, end=None, dialect="postgresql")
    stmt = select(rows.c.gpu_id, rows.c.sampled_at, *(rows.c[c] for c in COLUMNS))
    return sorted(tuple(r) for r in session.execute(stmt))


def blocks(session: Session) -> list[tuple[Any, ...]]:
    """(gpu_id, block_start, block_s, sample_count) of every block, in order."""
    b = gpu_sample_block.c
    stmt = select(b.gpu_id, b.block_start, b.block_s, b.sample_count)
    return sorted(tuple(r) for r in session.execute(stmt))


def run(factory: sessionmaker[Session], now: datetime) -> CompactResult:
    with session_scope(factory) as s:
        set_mark(s, GPU.arrival_key, now)
    return compact(factory, compact_after_s=2 * 3600, now=now, minutes_after_s=None)


def nothing_done(result: CompactResult) -> bool:
    return (
        result.rows_packed["gpu_sample"] == 0
        and result.blocks_written["gpu_sample"] == 0
        and result.blocks_reopened["gpu_sample"] == 0
    )


def rollups(session: Session) -> dict[int, list[tuple[Any, ...]]]:
    return {
        res: sorted(tuple(r) for r in session.execute(select(table)))
        for res, table in GPU_ROLLUPS.items()
    }


def same_rollups(got: dict[int, list[tuple[Any, ...]]], want: dict[int, Any]) -> None:
    """Equal buckets; sums of non-integral doubles may differ in the last bits (another
    order once rows come from blocks)."""
    for res, rows in want.items():
        assert len(got[res]) == len(rows) > 0
        for a, b in zip(got[res], rows, strict=True):
            for x, y in zip(a, b, strict=True):
                assert x == y or (isinstance(y, float) and x == pytest.approx(y, rel=1e-12))


def chart(session: Session, node_id: int, start: datetime, end: datetime, step_s: int) -> Any:
    node = session.get(Node, node_id)
    assert node is not None
    return metrics_service.node_series_from(
        session, node=node, metrics=COLUMNS, start=start, end=end, step_s=step_s, source_s=0
    )


def same_series(got: list[Any], want: list[Any]) -> None:
    assert [(g.gpu_uuid, g.times) for g in got] == [(w.gpu_uuid, w.times) for w in want]
    assert want[0].times
    for g, w in zip(got, want, strict=True):
        for name, values in w.values.items():
            for a, b in zip(g.values[name], values, strict=True):
                assert (a is None and b is None) or a == pytest.approx(b, rel=1e-12), name


def test_slow_samples_pack_into_wide_blocks_and_read_back_exactly(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s)
        seed(s, node, [(D0, D0 + 20 * HOUR, 60)])
        node_id = node.id
    # A range starting inside the first block, over the second into raw rows.
    start, end = D0 + timedelta(hours=5, minutes=30, seconds=17), D0 + 14 * HOUR
    with session_scope(factory) as s:
        before = every_row(s)
        charts = {step: chart(s, node_id, start, end, step) for step in (0, 60, 3600)}
        fold.fold_range(s, GPU, lo_s=D0.timestamp(), hi_s=(D0 + DAY).timestamp())
        from_raw = rollups(s)

    # The horizon (now - 2 h, on the hour) is 12:00: 00:00-06:00 and 06:00-12:00 are whole
    # spans before it, 12:00-18:00 is not.
    result = run(factory, D0 + 14 * HOUR)
    assert result.rows_packed["gpu_sample"] == 2 * 2 * 360
    with session_scope(factory) as s:
        g0, g1 = (g.id for g in s.get(Node, node_id).gpus)  # type: ignore[union-attr]
        assert blocks(s) == [(g, at, WIDE_BLOCK_S, 360) for g in (g0, g1) for at in (D0, D0 + WIDE)]
        # Energy kept as whole-millijoule steps in wide blocks too.
        forms = s.execute(select(gpu_sample_block.c.energy_j, gpu_sample_block.c.energy_j_steps))
        assert all(doubles is None and len(steps) == 360 for doubles, steps in forms)
        assert every_row(s) == before
        assert any(r[5] == BIG for r in before)
        for step, want in charts.items():
            same_series(chart(s, node_id, start, end, step), want)
        # Rollups recomputed from the wide blocks equal those folded from the raw rows.
        for table in GPU_ROLLUPS.values():
            s.execute(delete(table))
        fold.fold_range(s, GPU, lo_s=D0.timestamp(), hi_s=(D0 + DAY).timestamp())
        same_rollups(rollups(s), from_raw)
    # Nothing changes at the next run; 12:00-18:00 is packed once it is past the horizon.
    assert nothing_done(run(factory, D0 + 14 * HOUR))
    assert run(factory, D0 + 21 * HOUR).blocks_written["gpu_sample"] == 2
    assert nothing_done(run(factory, D0 + 21 * HOUR))
    # The last span: 18:00-20:00 but each GPU's newest 10 minutes (they stay raw).
    assert run(factory, D0 + DAY + 3 * HOUR).rows_packed["gpu_sample"] == 2 * 109
    assert nothing_done(run(factory, D0 + DAY + 3 * HOUR))
    with session_scope(factory) as s:
        spans = [(D0 + i * WIDE, WIDE_BLOCK_S, 360) for i in range(3)]
        assert [b[1:] for b in blocks(s)] == [*spans, (D0 + 3 * WIDE, WIDE_BLOCK_S, 109)] * 2
        assert every_row(s) == before
        for table in GPU_ROLLUPS.values():
            s.execute(delete(table))
    # A rebuild finds the stored span from the blocks (each counted to its own end).
    rebuild(factory, since=None, now=D0 + DAY + 3 * HOUR)
    with session_scope(factory) as s:
        same_rollups(rollups(s), from_raw)


def test_a_series_slowing_from_10_s_to_60_s_inside_a_span_keeps_it_in_hour_blocks(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 15 * HOUR, 10), (D0 + 15 * HOUR, D0 + DAY + 6 * HOUR, 60)])
        before = every_row(s)
        g = node.gpus[0].id
    # 14:00: hours 00-11 (10-s samples) are hour blocks as before.
    assert run(factory, D0 + 14 * HOUR).blocks_written["gpu_sample"] == 12
    # 17:00: hours 12-14.
    assert run(factory, D0 + 17 * HOUR).blocks_written["gpu_sample"] == 3
    # Next day 03:00: hours 15-17 (60 s) as hours, their span 12:00-18:00 has hour blocks;
    # 18:00-24:00 (60 s) as one 6-hour block; the next day's first span waits.
    assert run(factory, D0 + DAY + 3 * HOUR).blocks_written["gpu_sample"] == 3 + 1
    assert nothing_done(run(factory, D0 + DAY + 3 * HOUR))
    with session_scope(factory) as s:
        hours = [(g, D0 + h * HOUR, None, 360 if h < 15 else 60) for h in range(18)]
        assert blocks(s) == [*hours, (g, D0 + 18 * HOUR, WIDE_BLOCK_S, 360)]
        assert every_row(s) == before
        assert s.scalar(select(gpu_sample.c.sampled_at).order_by(gpu_sample.c.sampled_at)) == (
            D0 + DAY
        )


def test_a_span_of_mostly_10_s_samples_is_packed_in_hours_in_one_run(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 4 * HOUR, 10), (D0 + 4 * HOUR, D0 + 10 * HOUR, 60)])
        before = every_row(s)
    # 00:00-06:00's median spacing is 10 s: six hour blocks, no 6-hour block over them;
    # 06:00-12:00 (60 s) waits for its end.
    assert run(factory, D0 + 9 * HOUR).blocks_written["gpu_sample"] == 6
    assert nothing_done(run(factory, D0 + 9 * HOUR))
    with session_scope(factory) as s:
        assert [(b[1], b[2]) for b in blocks(s)] == [(D0 + h * HOUR, None) for h in range(6)]
        assert every_row(s) == before


def test_late_and_duplicate_samples_reopen_a_wide_block(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 10 * HOUR, 60)])
        g = node.gpus[0].id
    now = D0 + 9 * HOUR
    run(factory, now)
    late = now - timedelta(minutes=1)
    with session_scope(factory) as s:
        before = every_row(s)
        assert blocks(s) == [(g, D0, WIDE_BLOCK_S, 360)]
        blank = dict.fromkeys(COLUMNS)
        s.execute(
            gpu_sample.insert(),
            [
                # between two stored samples, 5 hours into the block
                {"gpu_id": g, "sampled_at": D0 + timedelta(hours=5, seconds=30)}
                | {"received_at": late, **blank, "power_w": 123.25},
                # a duplicate of a packed sample with another value: the first stored wins
                {"gpu_id": g, "sampled_at": D0 + 3 * HOUR}
                | {"received_at": late, **blank, "util_gpu_pct": 99.0},
            ],
        )
    result = run(factory, now)
    assert result.blocks_reopened["gpu_sample"] == 1
    assert result.rows_packed["gpu_sample"] == 361
    assert nothing_done(run(factory, now))
    with session_scope(factory) as s:
        assert blocks(s) == [(g, D0, WIDE_BLOCK_S, 361)]
        inserted = (g, D0 + timedelta(hours=5, seconds=30), None, 123.25, None, None, None)
        assert every_row(s) == sorted([*before, inserted])


def test_retention_drops_a_wide_block_once_its_whole_span_is_older(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 16 * HOUR, 60)])
    now = D0 + 14 * HOUR
    run(factory, now)

    def prune_before(cutoff: datetime) -> int:
        with session_scope(factory) as s:
            days = (now - cutoff).total_seconds() / 86400
            return prune(s, retention_days=days, now=now)["gpu_sample_block"]

    # A cutoff an hour before the first span ends leaves its block (5 of its hours are older).
    assert prune_before(D0 + 5 * HOUR) == 0
    assert prune_before(D0 + 6 * HOUR) == 1
    with session_scope(factory) as s:
        assert [b[1] for b in blocks(s)] == [D0 + WIDE]


def test_a_sample_re_sent_after_its_span_was_packed_is_a_duplicate(
    factory: sessionmaker[Session], postgres_url: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    # 02:00 two days ago: the wide block starts two hours before the samples looked for.
    start = now.replace(hour=2, minute=0, second=0) - 2 * DAY
    first = batch("wide-b", gpus=1, samples_per_gpu=120, start=start, interval_s=60.0)
    answer = store_payload(postgres_url, first, received_at=start + 2 * HOUR)
    assert answer["samples_stored"] == 120
    packed = run(factory, now)
    with session_scope(factory) as s:
        assert [(b[1], b[2]) for b in blocks(s)] == [(start - 2 * HOUR, WIDE_BLOCK_S)]
    assert packed.rows_packed["gpu_sample"] == 120 - 11
    gpu_entry = first["gpus"][0]
    again = batch(
        "wide-b",
        gpus=[gpu_entry],
        samples_per_gpu=0,
        samples=[
            sample(gpu_entry, start + timedelta(minutes=5), util_gpu_pct=1),
            sample(gpu_entry, start + timedelta(minutes=5, seconds=30), util_gpu_pct=2),
        ],
    )
    answer = store_payload(postgres_url, again, received_at=now)
    assert (answer["samples_stored"], answer["samples_duplicate"]) == (1, 1)


def test_downgrading_0036_unpacks_wide_blocks_and_keeps_hour_blocks() -> None:
    with postgres_database() as url:
        engine = make_engine(url)
        try:
            made = make_session_factory(engine)
            with session_scope(made) as s:
                node = make_node(s, gpus=1)
                # 00:00-06:00 at 10 s (hour blocks), then 60 s (06:00-12:00 a 6-hour block).
                seed(s, node, [(D0, D0 + 6 * HOUR, 10), (D0 + 6 * HOUR, D0 + 14 * HOUR, 60)])
                before = every_row(s)
            run(made, D0 + 14 * HOUR)
            with session_scope(made) as s:
                assert [b[2] for b in blocks(s)] == [None] * 6 + [WIDE_BLOCK_S]
        finally:
            engine.dispose()
        command.downgrade(alembic_config(url), "0035")
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                hour_blocks = conn.exec_driver_sql(
                    "SELECT count(*), sum(sample_count) FROM gpu_sample_block"
                ).one()
                span = {"lo": D0 + 6 * HOUR, "hi": D0 + 12 * HOUR}
                energy = conn.exec_driver_sql(
                    "SELECT energy_j FROM gpu_sample WHERE sampled_at >= %(lo)s "
                    "AND sampled_at < %(hi)s ORDER BY sampled_at",
                    span,
                ).scalars()
                assert list(energy) == [r[6] for r in before if span["lo"] <= r[1] < span["hi"]]
        finally:
            engine.dispose()
        assert tuple(hour_blocks) == (6, 2160)
