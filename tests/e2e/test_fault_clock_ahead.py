"""Fault: one agent's clock 15 minutes ahead (bench/faults/clock_ahead.py, short): its readings
are refused and it says so; the node is not shown healthy but Unknown with the reason
``clock_skew`` and pages ``node-clock-skew``; the other nodes lose nothing; once the clock is
fixed its samples are stored again and it is healthy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.clock_ahead import run
from tests.dbs import wipe
from tests.notify_helpers import wipe_notify


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_notify(postgres_url)
    wipe(postgres_url)


def test_a_clock_15_minutes_ahead_is_shown_paged_and_recovers(pg_url: str, tmp_path: Path) -> None:
    result = run(pg_url, tmp_path, skew_s=900.0, seconds=8.0)

    assert result.skew_s is not None and 890 < result.skew_s < 910
    assert result.health["state"] == "unknown"
    assert [r["code"] for r in result.health["reasons"]] == ["clock_skew"]
    assert result.node_pages == ["node-clock-skew"]
    assert result.skewed_rows == 0
    assert "900 s ahead of the server's; fix the clock" in result.agent_said
    assert result.others_generated == result.others_stored > 100
    assert result.recovered_s is not None and result.healthy_after == "healthy"
