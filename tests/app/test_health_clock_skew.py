"""A node whose clock is further off the server's than ``future_tolerance_s`` is not healthy:
ahead, ingest refuses its readings, so its GPUs are not watched; behind, its readings are
stored at the wrong times. Its health says so (reason ``clock_skew``, Unknown) with the fix, and
the default rule ``node-clock-skew`` pages for it (found by bench/faults/clock_ahead.py: such a
node showed Healthy with no sample ever stored). Postgres and SQLite."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import load_settings
from app.health.rules import DEFAULT_RULES, rules_from_settings
from tests.app.helpers import post_batch
from tests.factories import batch, create_token, iso
from tests.live_server import LiveServer


@pytest.mark.parametrize(
    ("skew_s", "state", "words"),
    [
        (900.0, "unknown", "ahead of"),
        (-900.0, "unknown", "behind"),
        (20.0, "healthy", None),
        (-299.0, "healthy", None),
    ],
)
def test_a_clock_off_by_more_than_the_tolerance_is_a_finding(
    server: LiveServer, db_url: str, skew_s: float, state: str, words: str | None
) -> None:
    token = create_token(db_url, "skewed-a")
    now = datetime.now(UTC)
    shifted = now + timedelta(seconds=skew_s)
    payload = batch("skewed-a", start=shifted - timedelta(seconds=15), sent_at=iso(shifted))
    answer = post_batch(server.url, token, payload)
    assert answer.status_code == 200, answer.text
    refused = answer.json()["rejected_by_reason"].get("sampled_at_in_future", 0)
    assert refused == (6 if skew_s > 300 else 0)

    health = server_get(server, "/api/v1/nodes/skewed-a/health")
    assert health["state"] == state
    found = [r for r in health["reasons"] if r["code"] == "clock_skew"]
    if words is None:
        assert found == []
        return
    [reason] = found
    # The skew is measured against the receive time, a little after the test's clock read
    # (seconds on a loaded machine): 15 min, give or take the request's time.
    said = re.search(
        r"the node's clock is (\d+) min(?: (\d+) s)? (ahead of|behind) the server's "
        r"\(more than 5 min\): its readings are",
        reason["text"],
    )
    assert said is not None, reason["text"]
    assert said[3] == words
    assert abs(int(said[1]) * 60 + int(said[2] or 0) - abs(skew_s)) <= 30
    assert reason["action"]["code"] == "check_agent"
    assert "NTP/chrony" in reason["action"]["text"]
    assert reason["evidence"] == "/nodes/skewed-a#node-live"


def server_get(server: LiveServer, path: str) -> dict[str, Any]:
    got = httpx.get(f"{server.url}{path}", timeout=30)
    assert got.status_code == 200, got.text
    body: dict[str, Any] = got.json()
    return body


def test_the_tolerance_is_the_ingest_setting(tmp_path: Path) -> None:
    assert DEFAULT_RULES.future_tolerance_s == 300.0
    rules = rules_from_settings(load_settings(data_dir=tmp_path, future_tolerance_s=60))
    assert rules.future_tolerance_s == 60.0
