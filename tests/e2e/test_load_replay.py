"""The replay load client (bench/load_replay.py, short): against a real server, every sample it
counts as acknowledged is stored and nothing else; an agent refused for its token keeps its
batches, retries them and counts them as refused, never as acknowledged."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agents.fleetspec import FleetNode
from bench.load_replay import ReplayFleet
from tests.dbs import wipe
from tests.factories import create_token
from tests.server_process import ServerProcess, stored_sample_keys, stored_samples

PORTS = range(19500, 19600)


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe(postgres_url)


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 19500-19599")


def test_replayed_batches_are_stored_and_a_refused_agent_is_not_acknowledged(
    pg_url: str, tmp_path: Path
) -> None:
    nodes = [FleetNode(f"replay-{i}", create_token(pg_url, f"replay-{i}"), 8, {}) for i in range(3)]
    # A token issued for another hostname: 403, held and retried until the end.
    held = FleetNode("replay-held", create_token(pg_url, "replay-other"), 8, {})
    server = ServerProcess(pg_url, free_port(), tmp_path / "server.log", jobs=False)
    server.start()
    try:
        fleet = ReplayFleet(
            [*nodes, held],
            server_url=server.url,
            work=tmp_path,
            interval_s=1.0,
            batch_interval_s=1.0,
            refused_retry_s=2.0,
            flush_timeout_s=10.0,
        )
        fleet.start()
        time.sleep(14)
        fleet.stop(timeout_s=30)
        totals = fleet.totals()
        rows, distinct = stored_samples(pg_url)
        stored = stored_sample_keys(pg_url)
    finally:
        server.stop()

    held_uuids = {g["uuid"] for g in fleet.agents[-1].templates[0].payload["gpus"]}
    held_pending = sum(len(p.keys) for p in fleet.agents[-1].queue)
    # 3 agents × 8 GPUs, a batch of 2 rounds every 2 s, phases spread over the period.
    assert totals["samples_acked"] > 3 * 8 * 10
    assert rows == distinct == totals["samples_acked"] == len(stored)
    assert fleet.check_rows(stored) == (0, 0)
    assert not any(uuid in held_uuids for uuid, _ in stored)
    assert totals["push_refusals"] >= 4  # its oldest batch tried again every 2 s
    assert totals["batches_pending"] == len(fleet.agents[-1].queue) > 0
    assert totals["samples_generated"] == totals["samples_acked"] + held_pending
    assert fleet.latencies_s and min(fleet.latencies_s) > 0
    # The sample-by-sample check fails when a stored row is missing or one is extra.
    some = next(iter(stored))
    assert fleet.check_rows(stored - {some}) == (1, 0)
    assert fleet.check_rows(stored | {(some[0], some[1] + timedelta(hours=1))}) == (0, 1)
