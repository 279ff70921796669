"""GPU 1-minute rollups packed by day: charts read the same buckets before and after packing,
a late sample into a packed day re-opens it and is counted once, retention drops whole days,
and nothing is packed before the rollups have folded the day."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.series import minute_blocks
from app.series.compact import NEEDS_REBUILD, NOT_RUN, compact
from app.series.rollups import fold
from app.series.rollups.jobs import _advance_horizon as advance_horizon
from app.series.rollups.jobs import prune_rollups, set_mark
from app.series.rollups.models import GPU_ROLLUPS, rollup_watermark
from app.series.rollups.specs import GPU
from app.series.tables import gpu_sample
from tests.app.series_helpers import store_factory

T0 = datetime(2026, 11, 20, tzinfo=UTC)  # a UTC midnight
DAY = 86400
MINUTES = GPU_ROLLUPS[60]
PACKED = minute_blocks.gpu_sample_1m_block
METRICS = ["util_gpu_pct", "power_w", "ecc_corrected_aggregate_count", "clocks_event_reasons"]


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    with store_factory(postgres_url) as made:
        yield made


def seed(factory: sessionmaker[Session], days: int = 2, step_s: int = 30) -> int:
    """``days`` of one node's two GPUs at ``step_s``, folded into rollups; returns the node id."""
    with session_scope(factory) as s:
        node = Node(hostname="minute-a", labels={}, created_at=T0)
        s.add(node)
        s.flush()
        gpus = [
            Gpu(node_id=node.id, uuid=f"GPU-m{i}", index=i, first_seen_at=T0, last_seen_at=T0)
            for i in range(2)
        ]
        s.add_all(gpus)
        s.flush()
        rows = []
        for g in gpus:
            for k in range(days * DAY // step_s):
                at = T0 + timedelta(seconds=k * step_s)
                rows.append(
                    {
                        "gpu_id": g.id,
                        "sampled_at": at,
                        "received_at": at,
                        "util_gpu_pct": float((k * 3 + g.index) % 101),
                        "power_w": 300.25 + (k % 7) * 0.5,
                        "ecc_corrected_aggregate_count": 2**60 + k // 500,
                        "clocks_event_reasons": 1 << (k % 4),
                    }
                )
            g.last_sample_at = rows[-1]["sampled_at"]
        s.execute(gpu_sample.insert(), rows)
        fold.fold_range(s, GPU, lo_s=T0.timestamp(), hi_s=(T0 + timedelta(days=days)).timestamp())
        end = T0 + timedelta(days=days)
        set_mark(s, GPU.horizon_key, end)
        set_mark(s, GPU.arrival_key, end)
        return node.id


def charts(factory: sessionmaker[Session], node_id: int) -> dict[int, Any]:
    """The node's charts over the two days at a 5-min and a 1-h step, read as the page does."""
    with session_scope(factory) as s:
        node = s.get(Node, node_id)
        assert node is not None
        return {
            step: metrics_service.node_series_from(
                s,
                node=node,
                metrics=METRICS,
                start=T0 + timedelta(minutes=7),
                end=T0 + timedelta(days=2, minutes=-3),
                step_s=step,
            )
            for step in (300, 3600)
        }


def same(got: dict[int, Any], want: dict[int, Any]) -> None:
    for step in want:
        g_series, w_series = got[step], want[step]
        assert [(g.gpu_uuid, g.times) for g in g_series] == [
            (w.gpu_uuid, w.times) for w in w_series
        ]
        for g, w in zip(g_series, w_series, strict=True):
            for name in METRICS:
                for a, b in zip(g.values[name], w.values[name], strict=True):
                    assert (a is None and b is None) or a == pytest.approx(b, rel=1e-12), name


def minute_table(factory: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    with session_scope(factory) as s:
        rows = minute_blocks.minute_rows(
            columns=list(minute_blocks.VALUES), lo_s=None, hi_s=None, dialect="postgresql"
        )
        return sorted(tuple(r) for r in s.execute(select(rows)))


def test_packed_minutes_read_back_as_the_same_buckets_and_charts(
    factory: sessionmaker[Session],
) -> None:
    node_id = seed(factory)
    before_rows = minute_table(factory)
    before = charts(factory, node_id)
    result = compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    assert result.blocks_written["gpu_sample_1m"] == 4  # 2 GPUs × 2 days
    assert result.rows_packed["gpu_sample_1m"] == 2 * 2 * 1440
    with session_scope(factory) as s:
        assert s.scalar(select(func.count()).select_from(MINUTES)) == 0
        steps = s.scalar(select(PACKED.c.bucket_start_delta_s).limit(1))
        assert set(steps) == {0, 60}
    assert minute_table(factory) == before_rows  # every column, exact (2**60 counters too)
    same(charts(factory, node_id), before)


def test_a_late_sample_re_opens_its_packed_day_and_counts_once(
    factory: sessionmaker[Session],
) -> None:
    node_id = seed(factory)
    compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    with session_scope(factory) as s:
        gpu_id = s.scalars(select(Gpu.id).where(Gpu.node_id == node_id).order_by(Gpu.id)).first()
        late = T0 + timedelta(hours=5, seconds=7)  # between two stored samples
        s.execute(
            gpu_sample.insert().values(
                gpu_id=gpu_id,
                sampled_at=late,
                received_at=T0 + timedelta(days=3),
                power_w=1000.0,
            )
        )
        # What the arrival-watermark job does for a late sample: recompute its minute and hour.
        fold.fold_range(s, GPU, lo_s=late.timestamp(), hi_s=late.timestamp() + 1)
    rows = minute_table(factory)
    keys = [(r[0], r[1]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * 2 * 1440  # re-opened, not doubled
    samples = MINUTES.c.samples
    with session_scope(factory) as s:
        # The recompute covered every GPU (no owners given): both GPUs' first day are rows.
        assert s.scalar(select(func.count()).select_from(PACKED)) == 2
        minute = int(late.timestamp()) // 60 * 60
        got = s.execute(
            select(samples, MINUTES.c.power_w_max).where(
                MINUTES.c.gpu_id == gpu_id, MINUTES.c.bucket_start_s == minute
            )
        ).one()
        assert tuple(got) == (3, 1000.0)  # two 30-s samples and the late one
    again = compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    assert again.blocks_written["gpu_sample_1m"] == 2
    assert minute_table(factory) == rows


def test_retention_drops_packed_days_whose_every_minute_is_older(
    factory: sessionmaker[Session],
) -> None:
    seed(factory)
    compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    with session_scope(factory) as s:
        now = T0 + timedelta(days=1, hours=12)
        deleted = prune_rollups(s, minute_days=1.0, hour_days=1000.0, now=now)
        # cutoff T0 + 12 h: no whole day is older; at T0 + 2 days the first day goes.
        assert deleted["gpu_sample_1m_block"] == 0
        deleted = prune_rollups(s, minute_days=1.0, hour_days=1000.0, now=now + timedelta(hours=12))
        assert deleted["gpu_sample_1m_block"] == 2
        starts = sorted(s.scalars(select(PACKED.c.block_start_s)))
        assert starts == [int(T0.timestamp()) + DAY] * 2


def test_nothing_is_packed_before_the_rollups_fold_the_day(
    factory: sessionmaker[Session],
) -> None:
    seed(factory)
    with session_scope(factory) as s:
        set_mark(s, GPU.horizon_key, T0 + timedelta(hours=30))  # folded into day 2 only
    result = compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    assert result.blocks_written["gpu_sample_1m"] == 2  # day 1 of each GPU
    with session_scope(factory) as s:
        s.execute(delete(rollup_watermark).where(rollup_watermark.c.name == GPU.horizon_key))
        # A rollup run finds raw rows older than its lookback: it leaves the folded-until mark
        # unset (only a rebuild folds them) and says so.
        advance_horizon(s, GPU, now=T0 + timedelta(days=3), lookback_s=900)
    result = compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    assert result.waiting["gpu_sample_1m"] == NEEDS_REBUILD
    assert "fleetwatch rollups rebuild" in NEEDS_REBUILD
    assert "gpu_sample" not in result.waiting


def test_compaction_says_the_rollups_have_not_run_before_their_first_run(
    factory: sessionmaker[Session],
) -> None:
    seed(factory)
    with session_scope(factory) as s:
        s.execute(delete(rollup_watermark))
        s.execute(delete(MINUTES))
    result = compact(factory, compact_after_s=7200, minutes_after_s=DAY, now=T0 + timedelta(days=3))
    assert result.waiting["gpu_sample"] == NOT_RUN
    assert result.waiting["gpu_sample_1m"] == NOT_RUN
    assert "gpu_sample" not in result.rows_packed
