"""What the agent does with the real server's refusals: a token or hostname the server refuses
(401/403) keeps every batch spooled, says loudly what to fix, and delivers once it is fixed; a
batch refused for clock skew is not counted as sent and names NTP."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agents.agent import Agent, AgentConfig
from agents.payload import utc_now
from agents.simulated.collector import SimulatedCollector
from tests.app.helpers import counts
from tests.factories import create_token
from tests.live_server import LiveServer


def _agent(spool: Path, url: str, hostname: str, token: str, **options: Any) -> Agent:
    config = AgentConfig(hostname=hostname, spool_dir=spool, server_url=url, token=token, **options)
    return Agent(config, SimulatedCollector(hostname, 2, seed=1))


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_hostname_the_token_does_not_match_keeps_the_batches_and_says_what_to_fix(
    live: LiveServer, db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = create_token(db_url, "gpu-a-001")
    agent = _agent(tmp_path / "spool", live.url, "gpu-a-01", token)
    for _ in range(3):
        assert agent.run_once() is False
    assert len(agent.spool) == 3 and agent.batches_sent == 0 and agent.batches_dropped == 0
    [line] = _errors(caplog)  # once, not at every attempt
    assert "403" in line and "gpu-a-01" in line and "gpu-a-001" in line
    assert "--hostname" in line and "FLEETWATCH_AGENT_TOKEN" in line
    assert counts(db_url)["samples"] == 0

    fixed = _agent(tmp_path / "spool", live.url, "gpu-a-001", token)  # restarted, --hostname fixed
    assert fixed.push_pending(ignore_backoff=True) is True
    assert fixed.batches_sent == 3 and len(fixed.spool) == 0
    assert counts(db_url)["samples"] == 3 * 2


def test_an_unknown_token_keeps_the_batches_until_a_valid_one_delivers_them(
    live: LiveServer, db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = _agent(tmp_path / "spool", live.url, "gpu-b-001", "fwt_not-a-token")
    assert agent.run_once() is False
    assert agent.run_once() is False
    assert len(agent.spool) == 2 and agent.batches_dropped == 0
    [line] = _errors(caplog)
    assert "401" in line and "gpu-b-001" in line
    assert "FLEETWATCH_AGENT_TOKEN" in line and "fleetwatch token create gpu-b-001" in line

    token = create_token(db_url, "gpu-b-001")
    fixed = _agent(tmp_path / "spool", live.url, "gpu-b-001", token)
    assert fixed.run_once() is True
    assert fixed.batches_sent == 3 and counts(db_url)["samples"] == 3 * 2


def test_a_batch_refused_for_clock_skew_is_not_counted_as_sent_and_names_ntp(
    live: LiveServer, db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = create_token(db_url, "gpu-c-001")
    agent = _agent(tmp_path / "spool", live.url, "gpu-c-001", token)
    agent.collect(utc_now() + timedelta(hours=2))  # a clock two hours ahead dated these
    agent.cut_batch()
    assert agent.push_pending(ignore_backoff=True) is True
    assert agent.batches_sent == 0 and agent.samples_acked == 0
    assert agent.batches_refused_for_skew == 1 and agent.batches_dropped == 1
    assert len(agent.spool) == 0  # not retried: its times are wrong (docs/ingest.md)
    [line] = _errors(caplog)
    assert "sampled_at_in_future" in line and "NTP" in line
    assert counts(db_url)["samples"] == 0
