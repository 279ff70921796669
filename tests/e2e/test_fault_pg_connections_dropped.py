"""Fault: every Postgres session of the server's database ended (``pg_terminate_backend``, what
a Postgres restart looks like to the server) during ingest and during rule evaluation
(bench/faults/pg_connections_dropped.py, small): the same server process recovers, the agents
resend what failed, nothing is lost, every fault pages exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.pg_connections_dropped import run
from tests.dbs import wipe
from tests.notify_helpers import wipe_notify


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_notify(postgres_url)
    wipe(postgres_url)


def test_dropped_connections_lose_nothing_and_page_once(pg_url: str, tmp_path: Path) -> None:
    result = run(
        pg_url, tmp_path, nodes=4, drops=6, every_s=0.4, hunts=2, baseline=False, quiet_s=4.0
    )

    assert result.drops == 6 and result.sessions > 6
    assert result.server_pid_same and result.ready_after
    assert result.dropped_batches == 0
    assert result.generated > 300
    assert result.rows == result.distinct == result.generated == result.acked
    assert (result.missing, result.doubled, result.unwanted) == (0, 0, 0)
    assert result.paged_after_s is not None
