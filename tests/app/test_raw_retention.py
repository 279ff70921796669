"""The raw retention: its default, its link to an explicit ``retention_days`` (deployments that
set only that one keep their samples as long as before), and charts of ranges older than it
reading the 1-minute rollups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope
from app.fleet.charts import raw_from, resolve_chart_range
from app.fleet.models import Gpu, Node
from app.metrics import service as metrics_service
from app.metrics.service import choose_step_s
from app.retention.jobs import prune
from app.series.compact import compact
from app.series.rollups import fold, jobs
from app.series.rollups.models import rollup_watermark
from app.series.rollups.specs import GPU
from app.series.tables import gpu_sample
from app.storage import charts as storage_charts

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
T_OLD = datetime(2026, 11, 20, 6, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _no_retention_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FLEETWATCH_RETENTION_DAYS", "FLEETWATCH_RAW_RETENTION_DAYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("FLEETWATCH_CONFIG_FILE", raising=False)


def test_raw_samples_are_kept_seven_days_and_events_thirty_by_default() -> None:
    settings = Settings()
    assert (settings.raw_retention_days, settings.retention_days) == (7.0, 30.0)


def test_an_explicit_retention_alone_keeps_raw_samples_that_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEETWATCH_RETENTION_DAYS", "45")
    assert Settings().raw_retention_days == 45.0
    monkeypatch.setenv("FLEETWATCH_RAW_RETENTION_DAYS", "3")
    assert (Settings().raw_retention_days, Settings().retention_days) == (3.0, 45.0)


def test_a_bad_raw_retention_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETWATCH_RAW_RETENTION_DAYS", "0")
    with pytest.raises(ValueError, match="raw_retention_days"):
        Settings()


def test_a_raw_retention_shorter_than_a_health_window_stops_start_up_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Health reads raw IB port readings over its event window: half a day of raw samples
    under a 1-day window would quietly stop counting ports down for longer than that."""
    from app.config import SettingsError, load_settings

    monkeypatch.setenv("FLEETWATCH_RAW_RETENTION_DAYS", "0.5")
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert "FLEETWATCH_RAW_RETENTION_DAYS (0.5 days)" in message
    assert "FLEETWATCH_HEALTH_EVENT_WINDOW_S (86400 s)" in message
    monkeypatch.setenv("FLEETWATCH_HEALTH_EVENT_WINDOW_S", "3600")
    assert load_settings().raw_retention_days == 0.5  # the window fits: accepted


def test_a_range_older_than_the_raw_retention_is_read_at_a_minute_at_least() -> None:
    oldest = NOW - timedelta(days=7)
    recent = NOW - timedelta(minutes=15)
    old = oldest - timedelta(hours=1)
    assert choose_step_s(recent, NOW, raw_from=oldest) == 0  # raw samples
    assert choose_step_s(old, old + timedelta(minutes=15), raw_from=oldest) == 60
    assert choose_step_s(old, old + timedelta(hours=1), raw_from=oldest) == 60  # 10 s otherwise
    assert choose_step_s(old, old + timedelta(hours=1)) == 10
    assert choose_step_s(old, NOW, raw_from=oldest) == 1800  # coarser anyway


def test_the_chart_range_takes_the_raw_retention_into_account() -> None:
    settings = Settings(raw_retention_days=2)
    edge = raw_from(settings, NOW)
    assert edge == NOW - timedelta(days=2)
    start = (NOW - timedelta(days=3)).isoformat()
    end = (NOW - timedelta(days=3) + timedelta(minutes=10)).isoformat()
    window = resolve_chart_range(preset=None, start=start, end=end, now=NOW, raw_from=edge)
    assert window.step_s == 60
    assert (
        resolve_chart_range(preset="15m", start=None, end=None, now=NOW, raw_from=edge).step_s == 0
    )


def _one_gpu_node(session: Session, hostname: str) -> tuple[Node, Gpu]:
    """A node with one GPU, created at :data:`T_OLD`, and no rollup marks set."""
    session.execute(delete(rollup_watermark))
    node = Node(hostname=hostname, labels={}, created_at=T_OLD)
    session.add(node)
    session.flush()
    gpu = Gpu(node_id=node.id, uuid=f"GPU-{hostname}", index=0, first_seen_at=T_OLD)
    gpu.last_seen_at = T_OLD
    session.add(gpu)
    session.flush()
    return node, gpu


def test_a_chart_older_than_the_raw_retention_still_draws_from_the_minute_rollups(
    db_url: str,
) -> None:
    """Ten days on, with the raw samples of a quarter hour pruned (7-day raw retention), the
    node chart of that quarter hour shows the same minute averages as before the prune."""
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            node, gpu = _one_gpu_node(session, "old-a")
            session.execute(
                gpu_sample.insert(),
                [
                    {
                        "gpu_id": gpu.id,
                        "sampled_at": T_OLD + timedelta(seconds=s),
                        "received_at": T_OLD + timedelta(seconds=s),
                        "power_w": 100.0 + s,
                    }
                    for s in range(0, 900, 10)
                ],
            )
            base = int(T_OLD.timestamp())
            fold.fold_range(session, GPU, lo_s=base, hi_s=base + 3600)
            jobs.set_mark(session, GPU.horizon_key, T_OLD + timedelta(hours=2))
            session.refresh(node)
            now = T_OLD + timedelta(days=10)
            start, end = T_OLD, T_OLD + timedelta(minutes=15)
            edge = raw_from(Settings(), now)
            step = choose_step_s(start, end, raw_from=edge)
            args = {"node": node, "metrics": ["power_w"], "start": start, "end": end}
            before = metrics_service.node_series(session, step_s=step, **args)
            pruned = prune(session, retention_days=30, raw_retention_days=7, now=now)
            after = metrics_service.node_series(session, step_s=step, **args)
            raw_after = metrics_service.node_series(session, step_s=0, **args)
            session.rollback()
    finally:
        engine.dispose()
    assert (step, pruned["gpu_sample"]) == (60, 90)
    minutes = [100.0 + 60 * m + 25.0 for m in range(15)]  # mean of 6 samples 10 s apart
    assert after[0].values["power_w"] == before[0].values["power_w"] == minutes
    assert after[0].times == [T_OLD + timedelta(minutes=m) for m in range(15)]
    assert raw_after[0].times == []  # raw rows are gone: a 0-s step would draw nothing


def test_rollups_rebuild_leaves_the_rollups_of_pruned_samples_as_they_were(db_url: str) -> None:
    """Two hours of samples, folded; the raw retention then prunes the first hour and a half.
    A rebuild recomputes from the remaining raw rows only whole hours after the oldest one: the
    second hour keeps its 60 folded samples instead of being recomputed from the 30 left —
    with or without ``--since``, and with those 30 packed into a block (Postgres)."""
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    base = int(T_OLD.timestamp())
    try:
        with session_scope(factory) as session:
            node, gpu = _one_gpu_node(session, "old-b")
            gpu_id = gpu.id
            session.execute(
                gpu_sample.insert(),
                [
                    {
                        "gpu_id": gpu_id,
                        "sampled_at": T_OLD + timedelta(minutes=m),
                        "received_at": T_OLD + timedelta(minutes=m),
                        "power_w": float(m),
                    }
                    for m in range(120)
                ],
            )
            fold.fold_range(session, GPU, lo_s=base, hi_s=base + 7200)
        cutoff = T_OLD + timedelta(minutes=90)
        with session_scope(factory) as session:
            prune(session, retention_days=30, raw_retention_days=1, now=cutoff + timedelta(days=1))
        later = T_OLD + timedelta(hours=3)
        jobs.rebuild(factory, since=None, now=later)
        jobs.rebuild(factory, since=T_OLD - timedelta(days=1), now=later)
        # A --since inside the partly pruned hour starts at the next whole hour too.
        jobs.rebuild(factory, since=T_OLD + timedelta(minutes=95), now=later)
        if db_url.startswith("postgresql"):
            # Packed into the hour block of 10:00 (block_start on the hour, first sample at
            # :30): the rebuild counts from the block's first sample, not its start.
            with session_scope(factory) as session:
                jobs.set_mark(session, GPU.horizon_key, later)
            packed = compact(
                factory,
                compact_after_s=3600,
                now=T_OLD + timedelta(days=1),
                minutes_after_s=None,
            )
            assert packed.rows_packed["gpu_sample"] > 0, packed  # the oldest rows at least
            jobs.rebuild(factory, since=T_OLD - timedelta(days=1), now=later)
        hours, minutes = GPU.tables[3600], GPU.tables[60]
        with session_scope(factory) as session:
            kept = session.execute(
                select(hours.c.bucket_start_s, hours.c.samples, hours.c.power_w_sum)
                .where(hours.c.gpu_id == gpu_id)
                .order_by(hours.c.bucket_start_s)
            ).all()
            minute_count = session.scalar(
                select(func.count()).select_from(minutes).where(minutes.c.gpu_id == gpu_id)
            )
            session.execute(delete(Node).where(Node.id == node.id))
    finally:
        engine.dispose()
    assert [tuple(r) for r in kept] == [
        (base, 60, float(sum(range(60)))),
        (base + 3600, 60, float(sum(range(60, 120)))),
    ]
    assert minute_count == 120


def test_old_ranges_widen_to_whole_minutes_on_every_chart_page() -> None:
    """Before the raw retention only minutes are left: a range is widened to whole minutes
    (its edge minutes would otherwise be read from pruned raw rows and go missing), on the
    node and GPU pages and on the storage page, whose own least step is 15 s."""
    edge = NOW - timedelta(days=7)
    start = (edge - timedelta(days=1, seconds=-30)).isoformat()  # hh:mm:30
    end = (edge - timedelta(days=1, seconds=-630)).isoformat()  # 10 min later
    node = resolve_chart_range(preset=None, start=start, end=end, now=NOW, raw_from=edge)
    storage = storage_charts.resolve_range(
        preset=None, start=start, end=end, now=NOW, raw_from=edge
    )
    for window in (node, storage):
        assert (window.start.second, window.end.second, window.step_s) == (0, 0, 60)
        assert window.end - window.start == timedelta(minutes=11)
    recent = storage_charts.resolve_range(preset="1h", start=None, end=None, now=NOW, raw_from=edge)
    assert (recent.start, recent.step_s) == (NOW - timedelta(hours=1), 15)
