"""``fleetwatch rollups rebuild``, run as a real process on a database with history."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.migrate import upgrade
from app.series.rollups.models import GPU_ROLLUPS
from app.series.rollups.specs import DISK, GPU, get_mark
from app.series.tables import gpu_sample

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def fleetwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        check=False,
    )


def test_rebuild_rolls_up_history_and_sets_the_marks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rebuild.db'}"
    upgrade(url)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    with session_scope(factory) as session:
        node = Node(hostname="old", labels={}, created_at=T0)
        session.add(node)
        session.flush()
        gpu = Gpu(node_id=node.id, uuid="GPU-old", index=0, first_seen_at=T0, last_seen_at=T0)
        session.add(gpu)
        session.flush()
        session.execute(
            gpu_sample.insert(),
            [
                {"gpu_id": gpu.id, "sampled_at": at, "received_at": at, "power_w": 2.0 * i}
                for i in range(3)
                for at in [T0 + timedelta(hours=10 * i, seconds=7)]
            ],
        )
    done = fleetwatch("rollups", "rebuild", "--database-url", url)
    assert done.returncode == 0, done.stderr
    assert "gpu_sample: 3 minute and 3 hour buckets" in done.stdout
    hours = GPU_ROLLUPS[3600]
    with session_scope(factory) as session:
        got = session.execute(
            select(hours.c.bucket_start_s, hours.c.samples, hours.c.power_w_sum)
        ).all()
        assert [tuple(r) for r in got] == [
            (int(T0.timestamp()) + 36000 * i, 1, 2.0 * i) for i in range(3)
        ]
        assert get_mark(session, GPU.horizon_key) is not None
        assert get_mark(session, DISK.horizon_key) is not None
    again = fleetwatch(
        "rollups", "rebuild", "--since", "2026-11-01T15:00:00Z", "--database-url", url
    )
    assert again.returncode == 0, again.stderr
    assert "gpu_sample: 1 minute and 1 hour buckets" in again.stdout
    engine.dispose()


def test_a_bad_since_exits_2_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    upgrade(url)
    done = fleetwatch("rollups", "rebuild", "--since", "yesterday", "--database-url", url)
    assert done.returncode == 2
    assert "--since" in done.stderr
