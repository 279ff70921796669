"""GPU rollups: exact minute/hour aggregates (late samples, NULLs, counters' last value), the
arrival-watermark job is idempotent, and charts read from rollups equal charts from raw rows,
in UTC and in zones with DST changes and half-hour offsets."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.series.rollups import fold, jobs
from app.series.rollups.models import GPU_ROLLUPS, rollup_watermark
from app.series.rollups.source import source_resolution
from app.series.rollups.specs import GPU, get_mark
from app.series.tables import gpu_sample
from app.timebounds import offset_segments

T0 = datetime(2026, 3, 28, 0, 0, tzinfo=UTC)  # Europe/Berlin springs forward on 2026-03-29


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            s.execute(delete(rollup_watermark))
            yield s
    finally:
        engine.dispose()


def make_node(session: Session, gpus: int = 2) -> Node:
    node = Node(hostname="roll-a", labels={}, created_at=T0)
    session.add(node)
    session.flush()
    for i in range(gpus):
        session.add(
            Gpu(node_id=node.id, uuid=f"GPU-r{i}", index=i, first_seen_at=T0, last_seen_at=T0)
        )
    session.flush()
    session.refresh(node)
    return node


def put(session: Session, gpu_id: int, at: datetime, received: datetime | None = None, **v: Any):
    session.execute(
        gpu_sample.insert().values(gpu_id=gpu_id, sampled_at=at, received_at=received or at, **v)
    )


def rows(session: Session, resolution: int, *columns: str) -> list[tuple[Any, ...]]:
    table = GPU_ROLLUPS[resolution]
    stmt = select(table.c.gpu_id, table.c.bucket_start_s, *(table.c[c] for c in columns))
    return [
        tuple(r) for r in session.execute(stmt.order_by(table.c.gpu_id, table.c.bucket_start_s))
    ]


def test_minute_and_hour_rollups_hold_exact_sums_counts_maxima_and_last_values(
    session: Session,
) -> None:
    node = make_node(session, gpus=1)
    g = node.gpus[0].id
    base = int(T0.timestamp())
    # Inserted out of order; the NULL power is ignored; the counter's last value is the
    # newest sample's, not the largest (a reset at :50).
    put(
        session,
        g,
        T0 + timedelta(seconds=50),
        power_w=None,
        temp_c=40.0,
        ecc_corrected_volatile_count=1,
    )
    put(
        session,
        g,
        T0 + timedelta(seconds=10),
        power_w=100.5,
        temp_c=42.0,
        ecc_corrected_volatile_count=7,
    )
    put(
        session,
        g,
        T0 + timedelta(seconds=30),
        power_w=200.25,
        temp_c=41.0,
        ecc_corrected_volatile_count=9,
    )
    put(
        session,
        g,
        T0 + timedelta(minutes=1, seconds=5),
        power_w=50.0,
        ecc_corrected_volatile_count=2,
    )
    put(session, g, T0 + timedelta(hours=1, seconds=1), power_w=10.0)
    fold.fold_range(session, GPU, lo_s=base, hi_s=base + 7200)
    cols = (
        "samples",
        "power_w_sum",
        "power_w_n",
        "power_w_max",
        "temp_c_max",
        "ecc_corrected_volatile_count_max",
        "ecc_corrected_volatile_count_last",
    )
    assert rows(session, 60, *cols) == [
        (g, base, 3, 300.75, 2, 200.25, 42.0, 9, 1),
        (g, base + 60, 1, 50.0, 1, 50.0, None, 2, 2),
        (g, base + 3600, 1, 10.0, 1, 10.0, None, None, None),
    ]
    assert rows(session, 3600, *cols) == [
        (g, base, 4, 350.75, 3, 200.25, 42.0, 9, 2),
        (g, base + 3600, 1, 10.0, 1, 10.0, None, None, None),
    ]


def test_job_folds_a_late_sample_by_arrival_and_running_again_changes_nothing(
    session: Session,
) -> None:
    node = make_node(session, gpus=1)
    g = node.gpus[0].id
    now = T0 + timedelta(days=1)
    put(session, g, now - timedelta(seconds=100), power_w=100.0)
    put(session, g, now - timedelta(seconds=95), power_w=300.0)
    settings = {"lookback_s": 900.0, "minute_days": 90.0, "hour_days": 1000.0}
    jobs.run_once(session, now=now, **settings)
    first = rows(session, 60, "samples", "power_w_sum", "power_w_n")
    assert first == [(g, int(now.timestamp()) - 120, 2, 400.0, 2)]
    jobs.run_once(session, now=now + timedelta(seconds=1), **settings)
    assert rows(session, 60, "samples", "power_w_sum", "power_w_n") == first
    # A spool replay: sampled three hours ago, received now, long after the lookback.
    late = now - timedelta(hours=3)
    put(session, g, late, now + timedelta(seconds=30), power_w=8.0)
    later = now + timedelta(seconds=60)
    jobs.run_once(session, now=later, **settings)
    jobs.run_once(session, now=later + timedelta(seconds=60), **settings)
    bucket = int(late.timestamp()) // 60 * 60
    assert rows(session, 60, "samples", "power_w_sum", "power_w_n") == [
        (g, bucket, 1, 8.0, 1),
        (g, int(now.timestamp()) - 120, 2, 400.0, 2),
    ]
    assert rows(session, 3600, "samples", "power_w_sum") == [
        (g, bucket // 3600 * 3600, 1, 8.0),
        (g, (int(now.timestamp()) - 120) // 3600 * 3600, 2, 400.0),
    ]
    mark = session.scalar(
        select(rollup_watermark.c.mark_at).where(rollup_watermark.c.name == GPU.arrival_key)
    )
    assert mark == now + timedelta(seconds=30)  # the newest arrival, older than now − SETTLE_S


def test_rollups_older_than_their_retention_are_pruned(session: Session) -> None:
    node = make_node(session, gpus=1)
    g = node.gpus[0].id
    put(session, g, T0, power_w=1.0)
    put(session, g, T0 + timedelta(days=3), power_w=2.0)
    fold.fold_range(session, GPU, lo_s=T0.timestamp(), hi_s=T0.timestamp() + 4 * 86400)
    jobs.prune_rollups(session, minute_days=2, hour_days=4, now=T0 + timedelta(days=4, hours=1))
    assert [r[1] for r in rows(session, 60)] == [int(T0.timestamp()) + 3 * 86400]
    assert [r[1] for r in rows(session, 3600)] == [int(T0.timestamp()) + 3 * 86400]


def seed_two_days(session: Session) -> Node:
    """Samples every 10 s for 48 h from T0 on two GPUs, values exact in binary floating point
    (so sums in any order are exact), with gaps, NULLs and integer metrics."""
    node = make_node(session, gpus=2)
    values = []
    for gpu in node.gpus:
        for i in range(0, 48 * 360, 1):
            if i % 97 == 13:
                continue  # a missing sample
            values.append(
                {
                    "gpu_id": gpu.id,
                    "sampled_at": T0 + timedelta(seconds=10 * i + gpu.index),
                    "received_at": T0 + timedelta(seconds=10 * i + gpu.index),
                    "power_w": None if i % 7 == 0 else float(i % 500) + 0.25 * (i % 4),
                    "util_gpu_pct": float(i % 101),
                    "pstate": i % 13 if i % 5 else None,
                    "ecc_corrected_volatile_count": i // 100,
                }
            )
    session.execute(gpu_sample.insert(), values)
    fold.fold_range(session, GPU, lo_s=T0.timestamp(), hi_s=T0.timestamp() + 49 * 3600)
    jobs.set_mark(session, GPU.horizon_key, T0 + timedelta(days=3))
    return node


METRICS = ["power_w", "util_gpu_pct", "pstate", "ecc_corrected_volatile_count"]


def as_tuples(series: list[metrics_service.GpuSeries]) -> list[Any]:
    return [(s.gpu_uuid, s.times, s.values) for s in series]


@pytest.mark.parametrize("zone_name", ["UTC", "Europe/Berlin", "Asia/Kolkata"])
def test_chart_buckets_from_rollups_equal_those_from_raw_rows(
    session: Session, zone_name: str
) -> None:
    node = seed_two_days(session)
    zone = ZoneInfo(zone_name)
    start = T0 + timedelta(hours=1, minutes=7, seconds=13)
    end = T0 + timedelta(hours=46, minutes=52, seconds=41)
    for step in (60, 300, 3600, 7200, 21600, 86400):
        args = {"node": node, "metrics": METRICS, "start": start, "end": end, "step_s": step}
        raw = metrics_service.node_series_from(session, zone=zone, source_s=0, **args)
        assert sum(len(s.times) for s in raw) > 0
        sources = [60] + ([3600] if step % 3600 == 0 else [])
        for source in sources:
            segments = None
            if step >= 7200 and zone_name != "UTC":
                segments = offset_segments(start - timedelta(seconds=2 * step), end, zone)
            if source_resolution(step, segments) < source:
                continue  # 1-h rollups do not nest in Kolkata's local days
            rolled = metrics_service.node_series_from(session, zone=zone, source_s=source, **args)
            assert as_tuples(rolled) == as_tuples(raw), (step, source)
        picked = metrics_service.node_series(session, zone=zone, **args)
        assert as_tuples(picked) == as_tuples(raw), step


def test_samples_after_the_folded_until_mark_are_read_raw(session: Session) -> None:
    node = seed_two_days(session)
    args: dict[str, Any] = {"node": node, "metrics": METRICS, "step_s": 3600}
    args |= {"start": T0 + timedelta(hours=2), "end": T0 + timedelta(hours=30)}
    raw = as_tuples(metrics_service.node_series_from(session, source_s=0, **args))
    # As if the job had last run at 20:30:05 on the first day: later minutes are not folded,
    # and the hour of 20:00 is not complete (removed here, so reading it would show).
    base = int(T0.timestamp())
    minutes, hours = GPU_ROLLUPS[60], GPU_ROLLUPS[3600]
    session.execute(delete(minutes).where(minutes.c.bucket_start_s >= base + 20 * 3600 + 1800))
    session.execute(delete(hours).where(hours.c.bucket_start_s >= base + 20 * 3600))
    jobs.set_mark(session, GPU.horizon_key, T0 + timedelta(hours=20, minutes=30, seconds=5))
    assert as_tuples(metrics_service.node_series_from(session, source_s=3600, **args)) == raw
    # No mark at all (upgraded, not rebuilt): everything is read raw.
    session.execute(delete(hours))
    session.execute(delete(rollup_watermark))
    assert as_tuples(metrics_service.node_series_from(session, source_s=3600, **args)) == raw


def test_a_new_database_gets_its_mark_from_the_job_an_old_one_from_rebuild(
    session: Session,
) -> None:
    node = make_node(session, gpus=1)
    now = T0 + timedelta(days=1)
    put(session, node.gpus[0].id, now - timedelta(seconds=30), power_w=1.0)
    settings = {"lookback_s": 900.0, "minute_days": 90.0, "hour_days": 1000.0}
    jobs.run_once(session, now=now, **settings)
    assert get_mark(session, GPU.horizon_key) == now - timedelta(seconds=jobs.SETTLE_S)
    session.execute(delete(rollup_watermark))
    put(session, node.gpus[0].id, now - timedelta(hours=5), power_w=2.0)  # history
    jobs.run_once(session, now=now, **settings)
    assert get_mark(session, GPU.horizon_key) is None


def test_the_gpu_page_query_reads_one_gpu(session: Session) -> None:
    node = seed_two_days(session)
    args = {"node": node, "metrics": METRICS, "start": T0, "end": T0 + timedelta(days=1)}
    one = metrics_service.node_series_from(session, step_s=300, gpu_ids=[node.gpus[1].id], **args)
    both = metrics_service.node_series(session, step_s=300, **args)
    assert as_tuples(one) == as_tuples(both)[1:]


def test_source_is_the_coarsest_rollup_that_nests_in_the_buckets() -> None:
    day = datetime(2026, 3, 28, tzinfo=UTC)

    def seg(zone: str) -> list[tuple[datetime, int]]:
        return offset_segments(day, day + timedelta(days=3), ZoneInfo(zone))

    assert source_resolution(30) == 0
    assert source_resolution(60) == 60
    assert source_resolution(1800) == 60
    assert source_resolution(3600) == 3600
    assert source_resolution(86400) == 3600
    assert source_resolution(86400, seg("Europe/Berlin")) == 3600  # DST change at 01:00 UTC
    assert source_resolution(86400, seg("Asia/Kolkata")) == 60  # +05:30
    assert source_resolution(86400, seg("Asia/Kathmandu")) == 60  # +05:45
    lord_howe = offset_segments(
        datetime(2026, 4, 3, tzinfo=UTC),
        datetime(2026, 4, 6, tzinfo=UTC),
        ZoneInfo("Australia/Lord_Howe"),
    )
    assert len(lord_howe) == 2 and source_resolution(86400, lord_howe) == 60  # +11 → +10:30
    monrovia = offset_segments(
        datetime(1971, 1, 1, tzinfo=UTC),
        datetime(1971, 1, 4, tzinfo=UTC),
        ZoneInfo("Africa/Monrovia"),
    )
    assert source_resolution(86400, monrovia) == 0  # −00:44:30
