"""The upgrade path to sample blocks (a 0005 database holding history: upgrade, rebuild the
rollups, compact with the CLI, every value read back; downgrade unpacks the blocks), the raw
span kept for alert rule windows, and ``fleetwatch storage compact|stats`` on both backends."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import func, select, text

from app.db import make_engine, make_session_factory, session_scope
from app.migrate import alembic_config, upgrade
from app.series import jobs
from app.series.blocks import gpu_sample_block
from app.series.read import rows_between
from app.series.rollups.jobs import set_mark
from app.series.rollups.models import GPU_ROLLUPS
from app.series.rollups.specs import GPU
from app.series.tables import NvlinkSample, gpu_sample
from tests.dbs import postgres_database, wipe
from tests.factories import add_rules, wipe_alerts

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def fleetwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
        check=False,
    )


def seed_0005(url: str, hours: int, gpu_step_s: int = 60) -> None:
    """A node, a GPU and ``hours`` of GPU samples every ``gpu_step_s`` and 60-s 2-link NVLink
    samples, in 0005's tables."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO node (id, hostname, labels, created_at) "
                    "VALUES (1, 'old', '{}', :t)"
                ),
                {"t": T0},
            )
            conn.execute(
                text(
                    'INSERT INTO gpu (id, node_id, uuid, "index", state, first_seen_at, '
                    "last_seen_at, last_sample_at) VALUES (1, 1, 'GPU-old', 0, 'ok', :t, :t, :l)"
                ),
                {"t": T0, "l": T0 + timedelta(hours=hours, seconds=-gpu_step_s)},
            )
            conn.execute(
                text(
                    "INSERT INTO gpu_sample (gpu_id, sampled_at, received_at, util_gpu_pct, "
                    "ecc_corrected_aggregate_count) VALUES (1, :at, :at, :u, :c)"
                ),
                [
                    {
                        "at": T0 + timedelta(seconds=k * gpu_step_s),
                        "u": k % 100 + 0.5,
                        "c": 2**62 + k,
                    }
                    for k in range(hours * 3600 // gpu_step_s)
                ],
            )
            conn.execute(
                text(
                    "INSERT INTO nvlink_sample (gpu_id, link, sampled_at, state, crc_errors) "
                    "VALUES (1, :l, :at, :s, :c)"
                ),
                [
                    {"l": link, "at": T0 + timedelta(minutes=k), "s": "up", "c": k}
                    for link in (0, 1)
                    for k in range(hours * 60)
                ],
            )
    finally:
        engine.dispose()


def gpu_rows(url: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = rows_between(
                "gpu_sample",
                columns=["util_gpu_pct", "ecc_corrected_aggregate_count"],
                start=None,
                end=None,
                dialect=engine.dialect.name,
            )
            stmt = select(
                rows.c.sampled_at, rows.c.util_gpu_pct, rows.c.ecc_corrected_aggregate_count
            )
            return sorted(tuple(r) for r in conn.execute(stmt))
    finally:
        engine.dispose()


def count(url: str, table: Any) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())
    finally:
        engine.dispose()


def test_a_0005_database_with_history_upgrades_compacts_and_downgrades_losing_nothing() -> None:
    with postgres_database() as url:
        command.downgrade(alembic_config(url), "0005")
        seed_0005(url, hours=5)
        expected = [(T0 + timedelta(minutes=k), k % 100 + 0.5, 2**62 + k) for k in range(5 * 60)]
        upgrade(url)
        assert gpu_rows(url) == expected

        # Before any rollup run, GPU rows are not compacted (they might not be folded yet).
        early = fleetwatch("storage", "compact", "--after", "3600", "--database-url", url)
        assert early.returncode == 0, early.stderr
        assert "gpu_sample: waits for the rollups' first run" in early.stdout
        # Everything is older than the horizon but each link's newest 10 minutes (11 samples),
        # in one 6-hour block per link.
        assert "nvlink_sample: 578 rows packed into 2 blocks" in early.stdout

        rebuilt = fleetwatch("rollups", "rebuild", "--database-url", url)
        assert rebuilt.returncode == 0, rebuilt.stderr
        done = fleetwatch("storage", "compact", "--after", "3600", "--database-url", url)
        assert done.returncode == 0, done.stderr
        # Each GPU keeps the health throttle window (60 s) + 10 minutes before its newest
        # sample raw (12 samples a minute apart): 300 - 12; samples a minute apart: one 6-hour
        # block.
        assert "gpu_sample: 288 rows packed into 1 blocks" in done.stdout
        # The minutes of 2026-11-01 (a whole day, folded by the rebuild) as one day block.
        assert "gpu_sample_1m: 300 rows packed into 1 blocks" in done.stdout
        assert gpu_rows(url) == expected
        assert count(url, gpu_sample_block) == 1

        stats = fleetwatch("storage", "stats", "--exact", "--database-url", url)
        assert stats.returncode == 0, stats.stderr
        lines = {line.split()[0]: line.split() for line in stats.stdout.splitlines()[1:]}
        assert lines["gpu_sample"][1] == "raw" and lines["gpu_sample"][3] == "12"
        assert lines["gpu_sample_block"][1:3] == ["hour/6-h", "blocks"]
        assert lines["gpu_sample_block"][4:6] == ["1", "288"]
        assert lines["nvlink_sample_block"][4:6] == ["2", "578"]
        assert lines["gpu_sample_1m"][1:3] == ["1", "min"]
        assert lines["gpu_sample_1m_block"][1:4] == ["1", "min,", "days"]
        assert lines["gpu_sample_1m_block"][6] == "300"

        command.downgrade(alembic_config(url), "0005")
        assert count(url, gpu_sample) == 300
        assert count(url, NvlinkSample) == 600
        assert count(url, GPU_ROLLUPS[60]) == 300  # the minute rollups unpacked too
        assert gpu_rows_raw(url) == expected


def gpu_rows_raw(url: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            stmt = text(
                "SELECT sampled_at, util_gpu_pct, ecc_corrected_aggregate_count FROM gpu_sample"
            )
            return sorted(tuple(r) for r in conn.execute(stmt))
    finally:
        engine.dispose()


def test_gpu_rows_stay_raw_as_far_back_as_an_enabled_rule_window_reaches(
    postgres_url: str,
) -> None:
    seed_0005_on_head(postgres_url)
    add_rules(
        postgres_url,
        {
            "name": "hot-6h",
            "condition": {
                "kind": "threshold",
                "target": "gpu",
                "metric": "temp_c",
                "aggregation": "avg",
                "window": "6h",
                "op": ">",
                "threshold": 85,
            },
        },
    )
    engine = make_engine(postgres_url)
    factory = make_session_factory(engine)
    try:
        with session_scope(factory) as s:
            set_mark(s, GPU.arrival_key, T0 + timedelta(days=1))
        now = T0 + timedelta(hours=10)
        result = jobs.run(factory, compact_after_s=7200, health_throttle_window_s=300, now=now)
        # GPU: raw for 6 h + 10 min, floored to the hour: 03:00 onwards stays raw.
        assert result.rows_packed["gpu_sample"] == 3 * 360
        # NVLink is read as "latest" only: packed up to 08:00 (2 h) in whole 6-h blocks: 06:00.
        assert result.rows_packed["nvlink_sample"] == 2 * 6 * 60
    finally:
        engine.dispose()
        wipe_alerts(postgres_url)
        wipe(postgres_url)


def seed_0005_on_head(url: str) -> None:
    seed_0005(url, hours=10, gpu_step_s=10)  # 10-s samples: hour blocks


def test_storage_commands_on_sqlite_say_what_they_do(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'try.db'}"
    upgrade(url)
    done = fleetwatch("storage", "compact", "--database-url", url)
    assert done.returncode == 0, done.stderr
    assert "SQLite keeps raw rows" in done.stdout
    stats = fleetwatch("storage", "stats", "--database-url", url)
    assert stats.returncode == 2
    assert "storage stats need Postgres" in stats.stderr
    for value in ("-5", "nan", "inf", "1e30", "abc"):
        bad = fleetwatch("storage", "compact", f"--after={value}", "--database-url", url)
        assert bad.returncode == 2, value
        assert "--after" in bad.stderr and "Traceback" not in bad.stderr, value
