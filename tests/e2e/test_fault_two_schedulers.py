"""Fault: schedulers started twice by mistake (bench/faults/two_schedulers.py, small): two
``fleetwatch worker`` processes and a second server with jobs on one Postgres database, one
worker killed with -9 halfway. Each fault pages once; each remediation hook runs once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.two_schedulers import run
from tests.dbs import wipe
from tests.notify_helpers import wipe_notify


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_notify(postgres_url)
    wipe(postgres_url)


def test_three_schedulers_page_once_and_run_each_action_once(pg_url: str, tmp_path: Path) -> None:
    result = run(pg_url, tmp_path, nodes=4, remediate=2, quiet_s=4.0)

    assert (result.missing, result.doubled, result.unwanted) == (0, 0, 0)
    assert result.hook_runs == {host: 1 for host in result.remediated}
    assert (result.actions, result.actions_not_succeeded) == (2, 0)
    assert result.generated > 300
    assert result.rows == result.distinct == result.generated
