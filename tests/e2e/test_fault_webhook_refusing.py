"""Fault: the webhook receiver refuses (503) for a while (bench/faults/webhook_refusing.py, time
compressed 30 times): every page is delivered once when it is back; refused past the deadline,
each is given up with its record, shown on the channel's page and counted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.webhook_refusing import run
from tests.dbs import wipe
from tests.notify_helpers import wipe_notify


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_notify(postgres_url)
    wipe(postgres_url)


def test_pages_wait_for_the_receiver_or_are_given_up_on_the_record(
    pg_url: str, tmp_path: Path
) -> None:
    result = run(pg_url, tmp_path, refuse_s=90.0, scale=30.0, nodes=2)

    assert result.refused_requests > 0
    assert (result.missing, result.doubled, result.unwanted) == (0, 0, 0)
    assert result.delivered_after_back_s is not None
    assert result.gave_up_rows == result.gave_up == 2
    assert result.record.startswith("gave up at the deadline after ")
    assert result.page_shows
    assert result.failed_counter >= 2
