"""Refusals of this node's settings (token, hostname, URL) keep the batches and say what to fix,
at a bounded rate; accepted batches whose readings were refused as dated in the future are not
counted as sent. Against the local receiver (the real server's answers:
test_agent_refusals_live.py)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.agent import Agent, AgentConfig
from agents.refusals import LoudLog, held_message, left_out_message, refused_for_skew
from agents.simulated.collector import SimulatedCollector
from tests.agents.agent_receiver import Receiver, Reply
from tests.agents.test_agent_cli import _cli

FORBIDDEN = (
    b"{\"detail\": \"node.hostname 'gpu-t-01' does not match this token's node 'gpu-t-001'\"}"
)


def _agent(spool: Path, url: str, **options: Any) -> Agent:
    config = AgentConfig(
        hostname="gpu-t-001", spool_dir=spool, server_url=url, token="fwt_t", **options
    )
    return Agent(config, SimulatedCollector("gpu-t-001", 2, seed=1))


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_wrong_server_url_keeps_the_batches_names_the_flag_and_waits_before_trying_again(
    tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.script(Reply(404, body=b'{"detail": "Not Found"}'))
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is False
    agent.collect()
    agent.cut_batch()
    assert agent.push_pending() is False  # held: the next try is a minute away
    assert len(receiver.requests) == 1 and len(agent.spool) == 2
    assert agent.push_refusals == 1 and agent.batches_dropped == 0
    [line] = _lines(caplog, logging.ERROR)
    assert f"no Fleetwatch ingest endpoint at {receiver.url}" in line and "--server" in line
    assert agent.push_pending(ignore_backoff=True) is True  # fixed: the backlog goes, in order
    assert agent.batches_sent == 2 and agent.last_refusal is None


def test_while_refused_the_spool_stays_within_its_bounds(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.default = Reply(403, body=FORBIDDEN)
    agent = _agent(tmp_path, receiver.url, spool_max_files=2)
    for _ in range(4):
        agent.run_once()
    assert len(agent.spool) == 2 and agent.spool.dropped_batches == 2


def test_a_running_agent_delivers_its_backlog_once_the_server_takes_the_token(
    tmp_path: Path, receiver: Receiver, wait_until: Callable[..., bool]
) -> None:
    receiver.script(*[Reply(401, body=b'{"detail": "unknown or revoked node token"}')] * 3)
    agent = _agent(
        tmp_path, receiver.url, interval_s=0.1, batch_interval_s=0.1, refused_retry_s=0.2
    )
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: agent.push_refusals >= 3 and agent.batches_sent >= 2)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert agent.batches_dropped == 0 and len(agent.spool) == 0
    assert agent.samples_acked == agent.samples_generated


def test_the_loud_log_repeats_a_cause_at_most_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    loud = LoudLog(logging.getLogger("test.loud"), clock=lambda: now[0])
    said = []
    for at in (0.0, 1.0, 59.0, 60.0, 61.0, 130.0):
        now[0] = at
        said.append(loud.log(logging.ERROR, "refused 403", "fix --hostname"))
    assert said == [True, False, False, True, False, True]
    assert loud.log(logging.ERROR, "refused 401", "fix the token") is True  # another cause
    loud.clear("refused 403")
    assert loud.log(logging.ERROR, "refused 403", "fix --hostname") is True


def test_held_messages_name_the_cause_and_the_fix() -> None:
    message = held_message(403, FORBIDDEN.decode(), hostname="gpu-t-01", server_url="http://fw")
    assert message.startswith("the server refused host gpu-t-01 with this token (HTTP 403: ")
    assert "does not match this token's node 'gpu-t-001'" in message
    assert "fix --hostname" in message and "FLEETWATCH_AGENT_TOKEN / --token" in message
    proxy = held_message(407, "", hostname="h", server_url="http://fw")
    assert "HTTPS_PROXY" in proxy and "HTTP 407: no detail" in proxy


def test_an_accepted_batch_with_its_readings_refused_as_future_is_not_sent(
    tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    answer = {
        "clock_skew_s": 3600.2,
        "samples_rejected": 2,
        "rejected_by_reason": {"sampled_at_in_future": 2},
        "events_rejected": {},
    }
    receiver.default = Reply(200, body=json.dumps(answer).encode())
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is True and agent.run_once() is True
    assert agent.batches_sent == 0 and agent.batches_refused_for_skew == 2
    assert agent.samples_acked == 0 and len(agent.spool) == 0
    [line] = _lines(caplog, logging.ERROR)  # once a minute, not per batch
    assert "2 samples of host gpu-t-001 as sampled_at_in_future" in line
    assert "3600 s ahead of the server's" in line and "NTP" in line


def test_a_clock_far_behind_is_warned_about_though_the_batch_is_stored(
    tmp_path: Path, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    answer = {"clock_skew_s": -120.4, "samples_rejected": 0, "rejected_by_reason": {}}
    receiver.default = Reply(200, body=json.dumps(answer).encode())
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is True
    assert agent.batches_sent == 1 and agent.samples_acked == 2
    [line] = _lines(caplog, logging.WARNING)
    assert "120 s behind the server's" in line and "NTP" in line


def test_refusals_for_skew_are_read_from_samples_events_and_sections() -> None:
    answer = {
        "rejected_by_reason": {"sampled_at_in_future": 3, "unknown_gpu": 1},
        "events_rejected": {"occurred_at_in_future": 1},
        "sections_rejected": {"nvlinks.sampled_at_in_future": 4, "disks.unknown_gpu": 2},
    }
    assert refused_for_skew(answer) == {"samples": 3, "events": 1, "nvlinks": 4}
    assert refused_for_skew({"rejected_by_reason": {"unknown_gpu": 5}}) == {}
    assert refused_for_skew(None) == {}


def test_once_exits_1_keeping_the_batch_and_says_what_to_fix(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.default = Reply(403, body=FORBIDDEN)
    spool = tmp_path / "spool"
    done = _cli(
        "--collector", "simulated", "--once", "--server", receiver.url, "--token", "fwt_t",
        "--hostname", "gpu-t-01", "--spool-dir", str(spool),
    )  # fmt: skip
    assert done.returncode == 1
    assert "the server refused host gpu-t-01 with this token (HTTP 403" in done.stderr
    assert "fix --hostname" in done.stderr and "stays in the spool" in done.stderr
    assert len(list(spool.glob("*.json"))) == 1


def test_values_the_server_left_out_are_said_with_their_reasons_and_first_path() -> None:
    answer = {
        "left_out": [
            {"loc": ["samples", 1, "power_w"], "reason": "number_type", "action": "nulled"}
        ],
        "left_out_by_reason": {"samples.number_type": 2, "events.int_type": 1},
    }
    assert left_out_message(answer, hostname="gpu-a-017") == (
        "the server left out 3 value(s) of host gpu-a-017 it cannot hold: events.int_type 1, "
        "samples.number_type 2 (first: samples.1.power_w); the rest of each batch was stored "
        "(docs/ingest.md)"
    )
    assert left_out_message({"left_out": [], "left_out_by_reason": {}}, hostname="h") is None
    assert left_out_message(None, hostname="h") is None
    assert left_out_message({"samples_stored": 4}, hostname="h") is None  # an older server
