"""The agent loop keeps collecting whatever the server does, replays spooled batches in order
with their original batch_id, retries what can succeed and drops what cannot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agents.agent import Agent, AgentConfig
from agents.simulated.collector import SimulatedCollector
from tests.agents.agent_receiver import Receiver, Reply

Wait = Callable[..., bool]


def _agent(spool: Path, url: str, **overrides: Any) -> Agent:
    options: dict[str, Any] = {
        "interval_s": 0.2,
        "batch_interval_s": 0.4,
        "backoff_base_s": 0.05,
        "backoff_cap_s": 0.2,
        "shutdown_timeout_s": 2.0,
        "labels": {"cluster": "test"},
    }
    options.update(overrides)
    config = AgentConfig(
        hostname="gpu-t-001", spool_dir=spool, server_url=url, token="fwt_t", **options
    )
    return Agent(config, SimulatedCollector("gpu-t-001", 4))


@contextmanager
def _running(agent: Agent) -> Iterator[threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_run_once_collects_spools_and_delivers_one_batch(
    tmp_path: Path, receiver: Receiver
) -> None:
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is True
    (payload,) = receiver.payloads()
    assert payload["node"]["hostname"] == "gpu-t-001" and len(payload["samples"]) == 4
    assert payload["node"]["labels"] == {"cluster": "test"}
    assert agent.samples_generated == agent.samples_acked == 4
    assert agent.batches_sent == 1 and agent.batches_dropped == 0 and len(agent.spool) == 0


def test_a_500_is_retried_with_the_same_batch_id_and_a_fresh_sent_at(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.script(Reply(500))
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is False
    assert len(agent.spool) == 1 and agent.push_failures == 1
    time.sleep(0.01)
    assert agent.push_pending(ignore_backoff=True) is True
    first, second = receiver.payloads()
    assert first["batch_id"] == second["batch_id"]
    assert first["samples"] == second["samples"]
    assert second["sent_at"] > first["sent_at"]
    assert agent.batches_sent == 1 and agent.samples_acked == 4


def test_after_a_retryable_failure_nothing_is_sent_until_the_backoff_ends(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.script(Reply(503, headers={"Retry-After": "30"}))
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is False
    agent.collect()
    agent.cut_batch()
    assert agent.push_pending() is False
    assert len(receiver.requests) == 1 and len(agent.spool) == 2


@pytest.mark.parametrize("status", [400, 413, 422])
def test_permanent_refusals_are_dropped_not_retried(
    tmp_path: Path, receiver: Receiver, status: int
) -> None:
    receiver.script(Reply(status, body=b'{"detail": "refused"}'))
    agent = _agent(tmp_path, receiver.url)
    assert agent.run_once() is True
    assert agent.push_pending(ignore_backoff=True) is True
    assert len(receiver.requests) == 1
    assert agent.batches_rejected == 1 and agent.batches_dropped == 1 and agent.batches_sent == 0


def test_retry_after_is_honoured_before_the_next_attempt(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    receiver.script(Reply(429, headers={"Retry-After": "1"}))
    agent = _agent(tmp_path, receiver.url, backoff_base_s=0.01, backoff_cap_s=0.02)
    with _running(agent):
        assert wait_until(lambda: agent.batches_sent >= 1)
    first, second = receiver.requests[:2]
    assert second.at - first.at >= 1.0
    assert first.payload and second.payload
    assert first.payload["batch_id"] == second.payload["batch_id"]


def test_collection_goes_on_while_the_server_is_down_and_the_backlog_replays_in_order(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    receiver.default = Reply(503)
    agent = _agent(tmp_path, receiver.url, interval_s=0.05, batch_interval_s=0.15)
    with _running(agent):
        assert wait_until(lambda: len(agent.spool) >= 4 and agent.push_failures >= 2)
        assert agent.samples_generated >= 16 and agent.batches_sent == 0
        receiver.default = Reply(200)
        assert wait_until(lambda: len(agent.spool) == 0 and agent.batches_sent >= 4)
    delivered = [r.payload for r in receiver.requests if r.payload and r.at]
    acked_ids: list[str] = []
    for payload in delivered:
        if payload["batch_id"] not in acked_ids:
            acked_ids.append(payload["batch_id"])
    firsts = [
        next(p for p in delivered if p["batch_id"] == b)["samples"][0]["sampled_at"]
        for b in acked_ids
    ]
    assert firsts == sorted(firsts)
    assert agent.samples_acked == agent.samples_generated
    assert len(agent.spool) == 0


def test_stop_spools_the_partial_batch_and_pushes_it(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    agent = _agent(tmp_path, receiver.url, interval_s=0.05, batch_interval_s=60.0)
    with _running(agent):
        assert wait_until(lambda: agent.samples_generated >= 12)
    assert receiver.payloads() and agent.batches_sent == 1
    assert agent.samples_acked == agent.samples_generated
    assert len(agent.spool) == 0


def test_batches_spooled_while_the_server_was_unreachable_survive_a_restart(
    tmp_path: Path, receiver: Receiver, refused_url: str
) -> None:
    offline = _agent(tmp_path, refused_url)
    assert offline.run_once() is False
    spooled = offline.spool.oldest()
    assert spooled is not None
    restarted = _agent(tmp_path, receiver.url)
    assert restarted.push_pending() is True
    assert receiver.payloads()[0]["batch_id"] == spooled.batch_id


def test_a_full_spool_counts_dropped_batches(tmp_path: Path, refused_url: str) -> None:
    agent = _agent(tmp_path, refused_url, spool_max_files=2)
    start = datetime.now(UTC)
    for step in range(5):
        # Explicit times: two rounds within one millisecond are one round (see collect()).
        assert agent.collect(start + timedelta(seconds=step)) == 4
        assert agent.cut_batch() is not None
    assert len(agent.spool) == 2 and agent.batches_dropped == 3


def test_agent_stop_fault_stops_collecting_and_pushing_for_its_duration(
    tmp_path: Path, receiver: Receiver, wait_until: Wait
) -> None:
    agent = _agent(tmp_path, receiver.url)
    assert isinstance(agent.collector, SimulatedCollector)
    agent.collector.inject("agent_stop", duration_s=0.5)
    assert agent.paused and agent.collect() == 0
    agent.cut_batch()
    assert agent.push_pending(ignore_backoff=True) is False and receiver.requests == []
    assert wait_until(lambda: not agent.paused, timeout_s=5)
    assert agent.collect() == 4


def test_collector_failure_becomes_an_agent_error_event_not_a_crash(
    tmp_path: Path, receiver: Receiver
) -> None:
    agent = _agent(tmp_path, receiver.url)

    def broken(now: Any) -> Any:
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    agent.collector.sample = broken  # type: ignore[method-assign]
    assert agent.run_once() is True
    (payload,) = receiver.payloads()
    assert payload["events"][0]["kind"] == "agent_error"
    assert "NVML_ERROR_UNKNOWN" in payload["events"][0]["message"]


def test_two_rounds_in_one_millisecond_give_one_sample_per_gpu(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from agents.agent import Agent, AgentConfig
    from agents.simulated.collector import SimulatedCollector

    agent = Agent(
        AgentConfig(hostname="n1", spool_dir=tmp_path), SimulatedCollector("n1", 4, seed=1)
    )
    moment = datetime(2026, 11, 29, 16, 0, 0, 123456, tzinfo=UTC)
    assert agent.collect(moment) == 4
    assert agent.collect(moment.replace(microsecond=123999)) == 0
    assert agent.collect(moment.replace(microsecond=124000)) == 4
    payload = agent.take_payload()
    assert payload is not None
    stamps = [s["sampled_at"] for s in payload["samples"]]
    assert len(set(zip(stamps, [s["gpu_uuid"] for s in payload["samples"]], strict=True))) == 8
