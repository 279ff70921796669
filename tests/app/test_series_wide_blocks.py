"""GPU blocks of slowly sampled series (:data:`app.series.blocks.WIDE_BLOCK_S`, a day): samples
60 s apart packed into day blocks read back exactly (rows, charts over a range starting inside a
block, rollups rebuilt from them, energy as steps), a series switching from 10-s to 60-s
samples mid-day (no overlap, no loss, nothing packed twice), late and duplicate samples
re-opening a day block, retention of day blocks, a re-sent sample of a packed day, and the
downgrade of revision 0035."""

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


def test_slow_samples_pack_into_day_blocks_and_read_back_exactly(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s)
        seed(s, node, [(D0, D0 + DAY + 20 * HOUR, 60)])
        node_id = node.id
    # A range starting inside the day block, over its end into the raw rows of the next day.
    start, end = D0 + timedelta(hours=5, minutes=30, seconds=17), D0 + DAY + 2 * HOUR
    with session_scope(factory) as s:
        before = every_row(s)
        charts = {step: chart(s, node_id, start, end, step) for step in (0, 60, 3600)}
        fold.fold_range(s, GPU, lo_s=D0.timestamp(), hi_s=(D0 + 2 * DAY).timestamp())
        from_raw = rollups(s)

    # The horizon (now - 2 h, on the hour) is inside day 2: only day 1 is a whole day before it.
    result = run(factory, D0 + DAY + 12 * HOUR)
    assert result.rows_packed["gpu_sample"] == 2 * 1440
    with session_scope(factory) as s:
        g0, g1 = (g.id for g in s.get(Node, node_id).gpus)  # type: ignore[union-attr]
        assert blocks(s) == [(g, D0, WIDE_BLOCK_S, 1440) for g in (g0, g1)]
        # Energy kept as whole-millijoule steps in the day block too.
        forms = s.execute(select(gpu_sample_block.c.energy_j, gpu_sample_block.c.energy_j_steps))
        assert all(doubles is None and len(steps) == 1440 for doubles, steps in forms)
        assert every_row(s) == before
        assert any(r[5] == BIG for r in before)
        for step, want in charts.items():
            same_series(chart(s, node_id, start, end, step), want)
        # Rollups recomputed from the day blocks equal those folded from the raw rows.
        for table in GPU_ROLLUPS.values():
            s.execute(delete(table))
        fold.fold_range(s, GPU, lo_s=D0.timestamp(), hi_s=(D0 + 2 * DAY).timestamp())
        same_rollups(rollups(s), from_raw)
    # Nothing changes at the next run; the second day is packed once it is past the horizon.
    assert nothing_done(run(factory, D0 + DAY + 12 * HOUR))
    assert run(factory, D0 + 2 * DAY + 3 * HOUR).blocks_written["gpu_sample"] == 2
    assert nothing_done(run(factory, D0 + 2 * DAY + 3 * HOUR))
    with session_scope(factory) as s:
        # Day 2 ends at 20:00 (each GPU's newest 10 minutes stay raw): 1200 - 11 samples.
        days = [(D0, WIDE_BLOCK_S, 1440), (D0 + DAY, WIDE_BLOCK_S, 1189)]
        assert [b[1:] for b in blocks(s)] == days * 2
        assert every_row(s) == before
        for table in GPU_ROLLUPS.values():
            s.execute(delete(table))
    # A rebuild finds the stored span from the blocks (each counted to its own end).
    rebuild(factory, since=None, now=D0 + 2 * DAY + 3 * HOUR)
    with session_scope(factory) as s:
        same_rollups(rollups(s), from_raw)


def test_a_series_slowing_from_10_s_to_60_s_mid_day_keeps_that_day_in_hour_blocks(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 12 * HOUR, 10), (D0 + 12 * HOUR, D0 + 2 * DAY + 6 * HOUR, 60)])
        before = every_row(s)
        g = node.gpus[0].id
    # 08:00: hours 00-05 (10-s samples) are hour blocks as before.
    assert run(factory, D0 + 8 * HOUR).blocks_written["gpu_sample"] == 6
    # 20:00: hours 06-17, six of them at 60 s: the day has hour blocks, it keeps them.
    assert run(factory, D0 + 20 * HOUR).blocks_written["gpu_sample"] == 12
    # Day 3, 03:00: day 1's last hours as hours, day 2 (60 s) as one day block; day 3 waits.
    assert run(factory, D0 + 2 * DAY + 3 * HOUR).blocks_written["gpu_sample"] == 6 + 1
    assert nothing_done(run(factory, D0 + 2 * DAY + 3 * HOUR))
    with session_scope(factory) as s:
        hours = [(g, D0 + h * HOUR, None, 360 if h < 12 else 60) for h in range(24)]
        assert blocks(s) == [*hours, (g, D0 + DAY, WIDE_BLOCK_S, 1440)]
        assert every_row(s) == before
        assert s.scalar(select(gpu_sample.c.sampled_at).order_by(gpu_sample.c.sampled_at)) == (
            D0 + 2 * DAY
        )


def test_a_day_of_mostly_10_s_samples_is_packed_in_hours_in_one_run(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 12 * HOUR, 10), (D0 + 12 * HOUR, D0 + DAY + 3 * HOUR, 60)])
        before = every_row(s)
    # Day 1's median spacing is 10 s: 24 hour blocks, no day block over them.
    assert run(factory, D0 + DAY + 3 * HOUR).blocks_written["gpu_sample"] == 24
    assert nothing_done(run(factory, D0 + DAY + 3 * HOUR))
    with session_scope(factory) as s:
        assert {b[2] for b in blocks(s)} == {None}
        assert every_row(s) == before


def test_late_and_duplicate_samples_reopen_a_day_block(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + DAY + 6 * HOUR, 60)])
        g = node.gpus[0].id
    now = D0 + DAY + 4 * HOUR
    run(factory, now)
    late = now - timedelta(minutes=1)
    with session_scope(factory) as s:
        before = every_row(s)
        assert blocks(s) == [(g, D0, WIDE_BLOCK_S, 1440)]
        blank = dict.fromkeys(COLUMNS)
        s.execute(
            gpu_sample.insert(),
            [
                # between two stored samples, 17 hours into the block
                {"gpu_id": g, "sampled_at": D0 + timedelta(hours=17, seconds=30)}
                | {"received_at": late, **blank, "power_w": 123.25},
                # a duplicate of a packed sample with another value: the first stored wins
                {"gpu_id": g, "sampled_at": D0 + 7 * HOUR}
                | {"received_at": late, **blank, "util_gpu_pct": 99.0},
            ],
        )
    result = run(factory, now)
    assert result.blocks_reopened["gpu_sample"] == 1
    assert result.rows_packed["gpu_sample"] == 1441
    assert nothing_done(run(factory, now))
    with session_scope(factory) as s:
        assert blocks(s) == [(g, D0, WIDE_BLOCK_S, 1441)]
        inserted = (g, D0 + timedelta(hours=17, seconds=30), None, 123.25, None, None, None)
        assert every_row(s) == sorted([*before, inserted])


def test_retention_drops_a_day_block_once_its_whole_day_is_older(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, [(D0, D0 + 2 * DAY + 6 * HOUR, 60)])
    now = D0 + 2 * DAY + 4 * HOUR
    run(factory, now)

    def prune_before(cutoff: datetime) -> int:
        with session_scope(factory) as s:
            days = (now - cutoff).total_seconds() / 86400
            return prune(s, retention_days=days, now=now)["gpu_sample_block"]

    # A cutoff an hour before day 1 ends leaves its block (23 of its hours are older).
    assert prune_before(D0 + 23 * HOUR) == 0
    assert prune_before(D0 + DAY) == 1
    with session_scope(factory) as s:
        assert [b[1] for b in blocks(s)] == [D0 + DAY]


def test_a_sample_re_sent_after_its_day_was_packed_is_a_duplicate(
    factory: sessionmaker[Session], postgres_url: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    # 02:00 two days ago: the day block starts two hours before the samples looked for.
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


def test_downgrading_0035_unpacks_day_blocks_and_keeps_hour_blocks() -> None:
    with postgres_database() as url:
        engine = make_engine(url)
        try:
            made = make_session_factory(engine)
            with session_scope(made) as s:
                node = make_node(s, gpus=1)
                # Day 1 at 10 s (hour blocks), day 2 at 60 s (a day block).
                seed(s, node, [(D0, D0 + DAY, 10), (D0 + DAY, D0 + 2 * DAY + 6 * HOUR, 60)])
                before = every_row(s)
            run(made, D0 + 2 * DAY + 4 * HOUR)
            with session_scope(made) as s:
                assert [b[2] for b in blocks(s)] == [None] * 24 + [WIDE_BLOCK_S]
        finally:
            engine.dispose()
        command.downgrade(alembic_config(url), "0034")
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                hour_blocks = conn.exec_driver_sql(
                    "SELECT count(*), sum(sample_count) FROM gpu_sample_block"
                ).one()
                raw = conn.exec_driver_sql(
                    "SELECT count(*) FROM gpu_sample WHERE sampled_at < %(end)s",
                    {"end": D0 + 2 * DAY},
                ).scalar()
                steps_back = conn.exec_driver_sql(
                    "SELECT energy_j FROM gpu_sample WHERE sampled_at >= %(day)s "
                    "AND sampled_at < %(end)s ORDER BY sampled_at",
                    {"day": D0 + DAY, "end": D0 + 2 * DAY},
                ).scalars()
                want = [r[6] for r in before if D0 + DAY <= r[1] < D0 + 2 * DAY]
                assert list(steps_back) == want
        finally:
            engine.dispose()
        assert tuple(hour_blocks) == (24, 8640)
        assert raw == 1440
