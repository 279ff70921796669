"""Fault: the agent's spool disk full while the server is down (bench/faults/spool_disk_full.py,
small): the real agent on a 128 KiB tmpfs of its own drops the oldest batches (counted, logged),
keeps running and sends the rest once the server is up; everything acknowledged is stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.spool_disk_full import namespaces_allowed, run
from tests.dbs import wipe


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe(postgres_url)


def test_a_full_spool_disk_drops_the_oldest_and_the_agent_keeps_running(
    pg_url: str, tmp_path: Path
) -> None:
    if not namespaces_allowed():
        pytest.skip("unshare -rm cannot mount a tmpfs here (user namespaces not allowed)")
    result = run(pg_url, tmp_path, disk_kib=128, down_s=8.0)

    assert result.real_disk and result.agent_exit == 0
    assert result.enospc_lines > 0 and result.dropped_batches == result.enospc_lines
    # A batch larger than the whole empty disk cannot be kept at all: counted apart.
    assert result.lost_batches == result.dropped_batches + result.unwritable
    assert result.still_spooled == 0
    assert 0 < result.acked < result.collected
    assert result.rows == result.distinct == result.acked
    assert result.recovered_s is not None
