"""``fleetwatch worker`` beside ``fleetwatch serve --no-jobs`` on one Postgres: the web process
stores batches and tells the worker (NOTIFY), the worker's jobs refresh the stored health; both
commands refuse SQLite, where the one server process runs the jobs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, text

from app.db import make_engine
from app.health.models import NodeHealthState
from app.worker import run_worker
from tests.app.test_cli import fleetwatch
from tests.app.test_pages import ingest
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import batch, create_token
from tests.live_server import LiveServer, free_port


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
    for args in (("worker",), ("serve", "--no-jobs"), ("serve", "--workers", "2")):
        done = fleetwatch(*args, "--database-url", url)
        assert done.returncode == 2, args
        assert "needs Postgres" in done.stderr, args


def test_serve_workers_shares_one_port_and_runs_the_jobs_in_one_child(pg: str) -> None:
    """``serve --workers 3``: three web processes answer on one port, every batch is stored
    whichever answers, and the jobs (here the health refresh) run in one worker child, stopped
    with the server."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            "serve",
            "--database-url",
            pg,
            "--port",
            str(port),
            "--workers",
            "3",
        ],
        env={**os.environ, "FLEETWATCH_LOG_LEVEL": "warning"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        answered = set()
        for n in range(6):
            host = f"multi-{n}"
            token = create_token(pg, host)
            response = httpx.post(
                f"{base}/api/v1/ingest",
                json=batch(host, gpus=1),
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            assert response.status_code == 200, response.text
            answered.add(response.json()["samples_stored"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(stored_states(pg)) < 6:
            time.sleep(0.2)
        children = _children(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert answered == {3}
    assert sorted(stored_states(pg).values()) == ["healthy"] * 6  # the jobs child refreshed
    jobs = [pid for pid, line in children.items() if "app worker" in line]
    web = [pid for pid, line in children.items() if "multiprocessing" in line and "spawn" in line]
    assert (len(jobs), len(web)) == (1, 3), children
    time.sleep(1.0)
    assert [pid for pid in [*jobs, *web] if Path(f"/proc/{pid}").exists()] == []


def _children(pid: int) -> dict[int, str]:
    """Process id → command line of the processes whose parent is ``pid`` (Linux /proc)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            line = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found[int(stat.parent.name)] = line
    return found


def test_a_stopped_worker_ends_after_its_drain_with_a_job_stuck_on_a_lock(pg: str) -> None:
    """A job waiting on a lock that is never released (a session left open in a transaction)
    holds neither SIGTERM's stop past ``FLEETWATCH_JOB_DRAIN_S``: the worker names the job and
    ends. It stayed until the lock was released (Python's exit joins the job threads)."""
    engine = make_engine(pg)
    holder = engine.connect()
    worker = None
    try:
        holder.execute(text("LOCK TABLE node_action IN ACCESS EXCLUSIVE MODE"))
        worker = subprocess.Popen(
            [sys.executable, "-m", "app", "worker", "--database-url", pg],
            env={**os.environ, "FLEETWATCH_JOB_DRAIN_S": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not _waiting_on_a_lock(pg):
            assert time.monotonic() < deadline, "no job of the worker's waited on the lock"
            assert worker.poll() is None, worker.communicate()[0]
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=45)  # the lock is still held meanwhile
        assert worker.returncode == 0, output
        assert "fleetwatch worker stopped" in output
        assert re.search(r"jobs still running after 1 s: .*action-worker", output), output
        assert "exiting without waiting for: " in output
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        holder.rollback()
        holder.close()
        engine.dispose()


def _waiting_on_a_lock(url: str) -> bool:
    """Whether a backend of ``url``'s database waits on a heavyweight lock."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return bool(
                conn.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock'"
                    )
                )
            )
    finally:
        engine.dispose()
