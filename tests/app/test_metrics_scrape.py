"""A scrape's cost does not grow with the fleet (a fixed number of statements), and with
several processes every scrape serves the sum of their counters (prometheus-client's
multiprocess mode), whichever process answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event

from app.access.roles import Role
from app.db import make_engine, make_session_factory, session_scope
from app.exporter import service
from tests.access_helpers import add_token
from tests.app.metrics_helpers import value
from tests.app.test_health_query_count import TRANSACTION_CONTROL
from tests.app.test_worker import _children
from tests.dbs import wipe
from tests.factories import batch, create_token, store_payload, xid_batch
from tests.live_server import free_port

ROOT = Path(__file__).resolve().parents[2]
STORED = 'fleetwatch_ingest_batches_total{outcome="stored"}'


def statements(url: str) -> int:
    """The SQL statements one scrape's body takes on ``url`` (transaction control left out)."""
    engine = make_engine(url)
    ran: list[str] = []

    def count(_conn: object, _cursor: object, sql: str, *_args: object) -> None:
        if not sql.lstrip().upper().startswith(TRANSACTION_CONTROL):
            ran.append(sql)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with session_scope(make_session_factory(engine, read_only=True)) as session:
            body = service.exposition(
                session, stale_after_s=120, node_labels=["cluster"], now=datetime.now(UTC)
            )
        assert b"DCGM_FI_DEV_XID_ERRORS" in body
        return len(ran)
    finally:
        engine.dispose()


def test_a_scrape_takes_four_statements_for_2_nodes_as_for_12(db_url: str) -> None:
    now = datetime.now(UTC)
    for n in range(2):
        store_payload(db_url, xid_batch(f"node-{n:02d}", now), received_at=now)
    small = statements(db_url)
    for n in range(2, 12):
        store_payload(db_url, batch(f"node-{n:02d}", gpus=8), received_at=now)
    assert (small, statements(db_url)) == (4, 4)


def _python(code: str, metrics_dir: Path) -> str:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_in_multiprocess_mode_the_counters_of_every_process_are_summed(tmp_path: Path) -> None:
    count = (
        "from app.exporter import counters\n"
        "counters.batch_accepted(replayed=False, rejected_by_reason={}, seconds=0.02)\n"
        "counters.rules_evaluated(lane='timer', seconds=1.5, failed=1)\n"
    )
    for _ in range(3):  # three processes, each gone before the scrape
        _python(count, tmp_path)
    text = _python(
        "from prometheus_client import generate_latest\n"
        "from app.exporter import counters\n"
        "print(generate_latest(counters.source()).decode())\n",
        tmp_path,
    )
    assert value(text, STORED) == 3
    assert value(text, "fleetwatch_ingest_batch_duration_seconds_count") == 3
    timer = 'fleetwatch_rule_evaluation_duration_seconds_bucket{lane="timer",le="2.5"}'
    assert value(text, timer) == 3
    assert value(text, 'fleetwatch_rule_failures_total{lane="timer"}') == 3


@pytest.fixture
def pg(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe(postgres_url)


@pytest.fixture
def server_workers(pg: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``fleetwatch serve --workers 3`` on ``pg``, answering; its base URL and process."""
    port = free_port()
    env = {**os.environ, "FLEETWATCH_LOG_LEVEL": "warning"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    command = [sys.executable, "-m", "app", "serve", "--database-url", pg, "--port", str(port)]
    server = subprocess.Popen([*command, "--workers", "3"], env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert server.poll() is None, "fleetwatch serve --workers 3 exited"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield base, server
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_serve_workers_serves_the_sum_of_its_processes_counters_on_every_scrape(
    pg: str,
    server_workers: tuple[str, subprocess.Popen[bytes]],
) -> None:
    base, server = server_workers
    for n in range(6):
        host = f"multi-{n}"
        token = create_token(pg, host)
        answer = httpx.post(
            f"{base}/api/v1/ingest",
            json=batch(host, gpus=1),
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    # Scraped as Prometheus would, with a viewer API token (authorization: credentials).
    auth = {"Authorization": f"Bearer {add_token(pg, 'prometheus', Role.viewer, None)}"}
    scrapes = [httpx.get(f"{base}/metrics", timeout=30, headers=auth).text for _ in range(9)]
    assert [value(text, STORED) for text in scrapes] == [6.0] * 9
    assert all(text.count("DCGM_FI_DEV_GPU_UTIL{") == 6 for text in scrapes)
    [metrics_dir] = {
        entry.split("=", 1)[1]
        for pid in _children(server.pid)
        for entry in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        if entry.startswith("PROMETHEUS_MULTIPROC_DIR=")
    }
    assert Path(metrics_dir).is_dir()
    server.terminate()
    server.wait(timeout=30)
    assert not Path(metrics_dir).exists()  # the serve command removes the one it made
