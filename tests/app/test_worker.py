"""``fleetwatch worker`` beside ``fleetwatch serve --no-jobs`` on one Postgres: the web process
stores batches and tells the worker (NOTIFY), the worker's jobs refresh the stored health; both
commands refuse SQLite, where the one server process runs the jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.db import make_engine
from app.health.models import NodeHealthState
from app.worker import run_worker
from tests.app.test_cli import fleetwatch
from tests.app.test_pages import ingest
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import batch
from tests.live_server import LiveServer


@pytest.fixture
def pg(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe(postgres_url)


def stored_states(url: str) -> dict[int, str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(NodeHealthState.node_id, NodeHealthState.state))
            return {node_id: state for node_id, state in rows}
    finally:
        engine.dispose()


def test_a_web_process_without_jobs_wakes_the_worker(pg: str, tmp_path: Path) -> None:
    # Timers far away: only the web process's NOTIFY can explain a refresh within seconds.
    settings = make_settings(
        pg,
        tmp_path,
        health_refresh_interval_s=3600,
        health_recheck_s=86400,
        alert_eval_interval_s=3600,
    )
    web = LiveServer(settings, run_jobs=False)
    web.start()
    stop = threading.Event()
    worker = threading.Thread(target=run_worker, args=(settings, stop), daemon=True)
    worker.start()
    try:
        time.sleep(1.0)  # the worker's first refresh (of nothing) and its LISTEN
        ingest(web, batch("worker-node-1", gpus=2))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not stored_states(pg):
            time.sleep(0.1)
        assert list(stored_states(pg).values()) == ["healthy"]
        assert web.app is not None and web.app.state.runs_jobs is False
        assert getattr(web.app.state, "health_refresher", None) is None
    finally:
        stop.set()
        worker.join(timeout=15)
        web.stop()
    assert not worker.is_alive()


def test_worker_and_no_jobs_refuse_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fw.db'}"
    assert fleetwatch("migrate", "--database-url", url).returncode == 0
    for args in (("worker",), ("serve", "--no-jobs")):
        done = fleetwatch(*args, "--database-url", url)
        assert done.returncode == 2, args
        assert "needs Postgres" in done.stderr, args
