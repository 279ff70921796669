"""Fault: the server killed with ``kill -9`` mid-ingest (bench/faults/server_kill9.py, small):
the agents keep their batches and resend them; every sample they produced is stored once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.server_kill9 import run
from tests.dbs import wipe


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe(postgres_url)


def test_kill_9_mid_ingest_loses_nothing_and_stores_nothing_twice(
    pg_url: str, tmp_path: Path
) -> None:
    result = run(pg_url, tmp_path, nodes=4, kills=1, up_s=2.0, down_s=1.5)

    assert result.failures_while_down > 0, "the agents never saw the server down"
    assert result.totals["batches_dropped"] == 0
    assert result.totals["samples_generated"] > 300
    assert result.rows == result.distinct == result.totals["samples_generated"]
    assert result.totals["samples_acked"] == result.totals["samples_generated"]
    assert result.recover_s[0] is not None
