"""The compact layout: GPU and NVLink samples packed into hour blocks read back exactly (charts,
rollups, raw reads), late / duplicate / out-of-order samples into compacted hours, what stays
raw (not yet folded, newest of a silent GPU), retention of blocks, and SQLite untouched."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.nvlinks import service as nvlink_service
from app.retention.jobs import prune
from app.series.blocks import gpu_sample_block, nvlink_sample_block
from app.series.compact import compact
from app.series.read import rows_between
from app.series.rollups import fold
from app.series.rollups.jobs import set_mark
from app.series.rollups.models import GPU_ROLLUPS
from app.series.rollups.specs import GPU
from app.series.tables import NvlinkSample, gpu_sample
from tests.app.series_helpers import store_factory
from tests.factories import batch, sample, store_payload

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=5)
BIG = 2**53 + 1  # not exact as a double: an integer metric must stay bigint


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    with store_factory(postgres_url) as made:
        yield made


def make_node(session: Session, gpus: int = 2) -> Node:
    node = Node(hostname="pack-a", labels={}, created_at=T0)
    session.add(node)
    session.flush()
    for i in range(gpus):
        session.add(
            Gpu(node_id=node.id, uuid=f"GPU-p{i}", index=i, first_seen_at=T0, last_seen_at=T0)
        )
    session.flush()
    session.refresh(node)
    return node


def values_at(k: int, gpu: int) -> dict[str, Any]:
    """Deterministic values of sample ``k``: gauges with decimals, NULL gaps, a big counter."""
    return {
        "util_gpu_pct": float((k * 7 + gpu) % 101),
        "power_w": 70.93 + (k % 13) * 0.01,
        "temp_c": None if k % 17 == 0 else 30.0 + k % 5,
        "ecc_corrected_aggregate_count": BIG + k // 100,
        "clocks_event_reasons": 1 << (k % 3),
        "energy_j": 232629220.896 + k * 347.123,
    }


def seed(session: Session, node: Node, *, hours: float, step_s: int = 5) -> None:
    rows = []
    for gpu in node.gpus:
        for k in range(int(hours * 3600 / step_s)):
            at = T0 + timedelta(seconds=k * step_s)
            rows.append(
                {"gpu_id": gpu.id, "sampled_at": at, "received_at": at, **values_at(k, gpu.index)}
            )
        gpu.last_sample_at = rows[-1]["sampled_at"]
    session.execute(gpu_sample.insert(), rows)


def every_row(session: Session, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = rows_between("gpu_sample", columns=columns, start=None, end=None, dialect="postgresql")
    stmt = select(rows.c.gpu_id, rows.c.sampled_at, *(rows.c[c] for c in columns))
    return sorted(tuple(r) for r in session.execute(stmt))


COLUMNS = list(values_at(0, 0))


def chart(session: Session, node: Node | None, step_s: int) -> Any:
    """The node's chart series of every column over the seeded 4 h, read from raw samples."""
    assert node is not None
    return metrics_service.node_series_from(
        session,
        node=node,
        metrics=COLUMNS,
        start=T0,
        end=T0 + timedelta(hours=4),
        step_s=step_s,
        source_s=0,
    )


def same_series(got: list[Any], want: list[Any]) -> None:
    """Equal series; averages may differ in the last bits (the rows are summed in another
    order once some come from blocks), maxima and raw values not at all."""
    assert [(g.gpu_uuid, g.times) for g in got] == [(w.gpu_uuid, w.times) for w in want]
    for g, w in zip(got, want, strict=True):
        for name, values in w.values.items():
            for a, b in zip(g.values[name], values, strict=True):
                assert (a is None and b is None) or a == pytest.approx(b, rel=1e-12), name


def count(session: Session, table: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(table)) or 0)


def test_compacted_gpu_samples_read_back_exactly_in_rows_charts_and_rollups(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s)
        seed(s, node, hours=4)
        set_mark(s, GPU.arrival_key, NOW)
    with session_scope(factory) as s:
        before = every_row(s, COLUMNS)
        node = s.get(Node, node.id)
        charts = {step: chart(s, node, step) for step in (0, 60, 3600)}
        fold.fold_minutes(s, GPU, lo_s=int(T0.timestamp()), hi_s=int(NOW.timestamp()))
        minutes = sorted(tuple(r) for r in s.execute(select(GPU_ROLLUPS[60])))

    result = compact(factory, compact_after_s=2 * 3600, now=NOW)

    # 08:00-11:00 packed (three whole hours, 720 samples each, both GPUs); 11:00-12:00 raw.
    assert result.rows_packed["gpu_sample"] == 2 * 3 * 720
    assert result.blocks_written["gpu_sample"] == 6
    with session_scope(factory) as s:
        assert count(s, gpu_sample) == 2 * 720
        assert s.scalar(select(func.min(gpu_sample.c.sampled_at))) == T0 + timedelta(hours=3)
        counts = s.scalars(select(gpu_sample_block.c.sample_count)).all()
        assert counts == [720] * 6
        after = every_row(s, COLUMNS)
        assert after == before
        assert any(r[5] == BIG for r in after)  # the 2**53+1 counter came back exact
        assert any(r[4] is None for r in after)  # a NULL stays NULL
        node = s.get(Node, node.id)
        for step, expected in charts.items():
            same_series(chart(s, node, step), expected)
        # A rebuild of the rollups over compacted hours reads the blocks: same buckets.
        s.execute(delete(GPU_ROLLUPS[60]))
        fold.fold_minutes(s, GPU, lo_s=int(T0.timestamp()), hi_s=int(NOW.timestamp()))
        rebuilt = sorted(tuple(r) for r in s.execute(select(GPU_ROLLUPS[60])))
        assert len(rebuilt) == len(minutes)
        for a, b in zip(rebuilt, minutes, strict=True):
            for x, y in zip(a, b, strict=True):
                # sums of non-integral doubles may differ in the last bits (another order)
                assert x == y or (isinstance(y, float) and x == pytest.approx(y, rel=1e-12))


def test_late_duplicate_and_out_of_order_samples_join_their_compacted_hour(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, hours=4, step_s=10)
        set_mark(s, GPU.arrival_key, NOW)
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    g = node.gpus[0].id
    late = NOW - timedelta(minutes=1)
    with session_scope(factory) as s:
        before = every_row(s, COLUMNS)
        blank = dict.fromkeys(COLUMNS)
        late_rows = [
            # a sample between two stored ones (out of order, in a compacted hour)
            (T0 + timedelta(seconds=15), {"util_gpu_pct": 55.5}),
            # a duplicate of a compacted sample with another value: the first stored wins
            (T0 + timedelta(seconds=20), {"util_gpu_pct": 99.0}),
            # a late sample into the second hour
            (T0 + timedelta(hours=1, seconds=3), {"power_w": 123.25}),
        ]
        s.execute(
            gpu_sample.insert(),
            [
                {"gpu_id": g, "sampled_at": at, "received_at": late, **blank, **v}
                for at, v in late_rows
            ],
        )
        set_mark(s, GPU.arrival_key, NOW)
    result = compact(factory, compact_after_s=2 * 3600, now=NOW)
    assert result.blocks_reopened["gpu_sample"] == 2
    assert result.rows_packed["gpu_sample"] == 2 * 360 + 2
    with session_scope(factory) as s:
        counts = {
            start: n
            for start, n in s.execute(
                select(gpu_sample_block.c.block_start, gpu_sample_block.c.sample_count)
            )
        }
        assert counts == {T0: 361, T0 + timedelta(hours=1): 361, T0 + timedelta(hours=2): 360}
        steps = s.scalar(
            select(gpu_sample_block.c.sampled_at_delta_us).where(
                gpu_sample_block.c.block_start == T0
            )
        )
        # 0 s, 10 s, then the late 15 s in its place (5 s, 5 s), then 10 s steps: in time order.
        assert steps[:5] == [0, 10_000_000, 5_000_000, 5_000_000, 10_000_000]
        after = every_row(s, COLUMNS)
        expected = sorted(
            [
                *before,
                (g, T0 + timedelta(seconds=15), 55.5, None, None, None, None, None),
                (g, T0 + timedelta(hours=1, seconds=3), None, 123.25, None, None, None, None),
            ]
        )
        assert after == expected


def test_unfolded_rows_and_the_newest_rows_of_a_silent_gpu_stay_raw(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=2)
        seed(s, node, hours=1)  # both GPUs silent since 09:00, five hours before NOW
        # GPU 1's rows arrived after the rollups' watermark: not folded yet, not packed.
        s.execute(
            gpu_sample.update()
            .where(gpu_sample.c.gpu_id == node.gpus[1].id)
            .values(received_at=NOW)
        )
        set_mark(s, GPU.arrival_key, NOW - timedelta(minutes=5))
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    with session_scope(factory) as s:
        g0, g1 = (g.id for g in node.gpus)
        grouped = select(gpu_sample.c.gpu_id, func.count()).group_by(gpu_sample.c.gpu_id)
        raw = {gpu_id: n for gpu_id, n in s.execute(grouped)}
        # GPU 0 keeps its last 10 minutes (the newest row is what the fleet pages show).
        assert raw == {g0: 121, g1: 720}
        newest = s.scalar(
            select(func.max(gpu_sample.c.sampled_at)).where(gpu_sample.c.gpu_id == g0)
        )
        assert newest == s.get(Gpu, g0).last_sample_at


def test_nvlink_samples_compact_and_the_latest_links_still_show(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        g = node.gpus[0].id
        rows = [
            {
                "gpu_id": g,
                "link": link,
                "sampled_at": T0 + timedelta(seconds=30 * k),
                "state": "up" if (link, k) != (3, 5) else "down",
                "speed_gbps": 26.562,
                "remote_pci_bus_id": "00000000:05:00.0",
                "remote_device_type": "switch",
                "tx_bytes_per_s": float(k * 1000 + link),
                "rx_bytes_per_s": None,
                "crc_errors": BIG,
                "replay_errors": k // 10,
                "recovery_errors": 0,
            }
            for link in range(4)
            for k in range(240)  # two hours at 30 s
        ]
        s.add_all(NvlinkSample(**r) for r in rows)
        latest_before = [
            (x.link, x.sampled_at, x.state)
            for x in nvlink_service.list_latest_links(s, gpus=node.gpus)
        ]
    # NVLink blocks are 6 h wide: 08:00-10:00 lies in the 06:00-12:00 block, packed once the
    # horizon (now - 1 h) has passed 12:00.
    early = compact(factory, compact_after_s=3600, now=T0 + timedelta(hours=3))
    assert early.blocks_written["nvlink_sample"] == 0
    result = compact(factory, compact_after_s=3600, now=T0 + timedelta(hours=5))
    assert result.blocks_written["nvlink_sample"] == 4
    with session_scope(factory) as s:
        assert count(s, nvlink_sample_block) == 4
        assert count(s, NvlinkSample) == 4 * 21  # newest - 600 s … newest, at 30 s
        latest = [
            (x.link, x.sampled_at, x.state)
            for x in nvlink_service.list_latest_links(s, gpus=[s.get(Gpu, g)])
        ]
        assert latest == latest_before
        columns = list(nvlink_sample_block.c.keys())[5:]
        rows_back = rows_between(
            "nvlink_sample", columns=columns, start=None, end=None, dialect="postgresql"
        )
        got = sorted(tuple(r) for r in s.execute(select(rows_back)))
        want = sorted(
            (r["gpu_id"], r["link"], r["sampled_at"], *(r[c] for c in columns)) for r in rows
        )
        assert got == want


def test_retention_drops_blocks_whose_whole_hour_is_older(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = make_node(s, gpus=1)
        seed(s, node, hours=4, step_s=10)  # hour blocks (60-s samples: a day block)
        set_mark(s, GPU.arrival_key, NOW)
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    with session_scope(factory) as s:
        # cutoff 09:30: the 08:00 block goes, the 09:00 block (half of it newer) stays.
        deleted = prune(
            s, retention_days=(NOW - (T0 + timedelta(minutes=90))).total_seconds() / 86400, now=NOW
        )
        assert deleted["gpu_sample_block"] == 1
        starts = s.scalars(select(gpu_sample_block.c.block_start)).all()
        assert starts == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]


def test_sqlite_keeps_raw_rows(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        made = make_session_factory(engine)
        with session_scope(made) as s:
            node = make_node(s, gpus=1)
            seed(s, node, hours=1, step_s=60)
        assert compact(made, compact_after_s=3600, now=NOW).rows_packed == {}
        with session_scope(made) as s:
            assert count(s, gpu_sample) == 60
            assert len(every_row_sqlite(s)) == 60
    finally:
        engine.dispose()
        from tests.dbs import wipe

        wipe(sqlite_url)


def every_row_sqlite(session: Session) -> list[Any]:
    rows = rows_between("gpu_sample", columns=COLUMNS, start=None, end=None, dialect="sqlite")
    return list(session.execute(select(rows)))


def test_a_sample_re_sent_after_its_hour_was_packed_is_a_duplicate(
    factory: sessionmaker[Session], postgres_url: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(hours=4)
    # 10-s samples (hour blocks; 60-s ones wait for their day: test_series_wide_blocks.py)
    first = batch("late-a", gpus=1, samples_per_gpu=120, start=start, interval_s=10.0)
    answer = store_payload(postgres_url, first, received_at=start + timedelta(hours=2))
    assert answer["samples_stored"] == 120
    with session_scope(factory) as s:
        set_mark(s, GPU.arrival_key, now)
    packed = compact(factory, compact_after_s=3600, now=now)
    assert packed.rows_packed["gpu_sample"] > 0
    # The agent re-sends one packed sample (a new batch id, another value) and a new one.
    gpu_entry = first["gpus"][0]
    again = batch(
        "late-a",
        gpus=[gpu_entry],
        samples_per_gpu=0,
        samples=[
            # 1e9 °C is implausible: nulled, but the sample is a duplicate, so not counted.
            sample(gpu_entry, start + timedelta(minutes=5), util_gpu_pct=1, temp_c=1e9),
            sample(gpu_entry, start + timedelta(minutes=5, seconds=35), util_gpu_pct=2),
        ],
    )
    answer = store_payload(postgres_url, again, received_at=now)
    assert (answer["samples_stored"], answer["samples_duplicate"]) == (1, 1)
    assert answer["nulled_values"] == {}
    with session_scope(factory) as s:
        rows = rows_between(
            "gpu_sample", columns=["util_gpu_pct"], start=None, end=None, dialect="postgresql"
        )
        got = s.execute(
            select(rows.c.sampled_at, rows.c.util_gpu_pct).where(
                rows.c.sampled_at.in_(
                    [start + timedelta(minutes=5), start + timedelta(minutes=5, seconds=35)]
                )
            )
        ).all()
        assert sorted(tuple(r) for r in got) == [
            (start + timedelta(minutes=5), 50.0),  # the first stored wins
            (start + timedelta(minutes=5, seconds=35), 2.0),
        ]
