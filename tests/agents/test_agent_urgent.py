"""A fault reaches the server at once: a round that brings a new event or a GPU that goes dark
cuts the batch there, instead of at the batch interval; the spool and backoff still apply."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agents.agent import Agent, AgentConfig
from agents.collectors.host import HostSource
from agents.simulated.collector import SimulatedCollector
from tests.agents.agent_receiver import Receiver, Reply

LONG_BATCH_S = 60.0  # the batch interval: only an urgent cut explains a batch before it


def _agent(spool: Path, url: str | None = None, **overrides: float) -> Agent:
    options = {"interval_s": 0.2, "batch_interval_s": LONG_BATCH_S, "backoff_base_s": 0.05}
    options.update(overrides)
    config = AgentConfig(
        hostname="gpu-t-001",
        spool_dir=spool,
        server_url=url,
        token="fwt_t" if url else None,
        **options,  # type: ignore[arg-type]
    )
    return Agent(config, SimulatedCollector("gpu-t-001", 4))


def _round(agent: Agent) -> None:
    time.sleep(0.01)  # rounds within one millisecond are skipped (payload time precision)
    agent.collect()


def test_a_quiet_round_waits_for_the_batch_interval(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    _round(agent)
    _round(agent)

    assert agent.batch_due() is False


def test_a_round_with_an_xid_makes_the_batch_due_at_once(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    _round(agent)
    agent.collector.inject("xid", 2, xid=79)  # type: ignore[attr-defined]
    _round(agent)

    assert agent.batch_due() is True
    agent.cut_batch()
    batch = agent.spool.oldest()
    assert batch is not None
    assert [e["xid"] for e in batch.payload["events"] if e["kind"] == "xid"] == [79]
    _round(agent)
    assert agent.batch_due() is False  # the next batch is an ordinary one again


def test_a_gpu_that_goes_dark_and_one_that_comes_back_make_the_batch_due(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    _round(agent)
    agent.collector.inject("gpu_lost", 1, 0.3)  # type: ignore[attr-defined]
    _round(agent)
    assert agent.batch_due() is True
    agent.cut_batch()
    time.sleep(0.4)  # the GPU is back: a state change that brings no event

    _round(agent)

    assert agent.batch_due() is True
    batch = agent.take_payload()
    assert batch is not None and batch["events"] == []
    _round(agent)
    assert agent.batch_due() is False


def test_an_nvlink_going_down_makes_the_batch_due_at_once(tmp_path: Path) -> None:
    agent = Agent(
        AgentConfig(hostname="gpu-t-002", spool_dir=tmp_path, batch_interval_s=LONG_BATCH_S),
        SimulatedCollector("gpu-t-002", 8),
    )
    _round(agent)
    _round(agent)
    assert agent.batch_due() is False
    agent.collector.inject("nvlink_down", 3, 60.0)  # type: ignore[attr-defined]

    _round(agent)

    assert agent.batch_due() is True
    payload = agent.take_payload()
    assert payload is not None
    down = [e for e in payload["nvlinks"] if e["state"] != "up"]
    assert [e["gpu_uuid"] for e in down] == [payload["gpus"][3]["uuid"]]
    _round(agent)
    assert agent.batch_due() is False


def test_nvlinks_that_cannot_be_read_do_not_keep_the_batch_urgent(tmp_path: Path) -> None:
    collector = SimulatedCollector("gpu-t-003", 8)
    agent = Agent(
        AgentConfig(hostname="gpu-t-003", spool_dir=tmp_path, batch_interval_s=LONG_BATCH_S),
        collector,
    )
    _round(agent)
    collector.inject("nvlink_down", 1, 60.0)
    _round(agent)
    assert agent.batch_due() is True
    agent.cut_batch()

    def unreadable(now: object) -> list[dict[str, object]]:
        raise RuntimeError("NVML timeout")

    collector.nvlinks = unreadable  # type: ignore[method-assign]
    _round(agent)
    _round(agent)

    assert agent.batch_due() is False


def test_the_running_agent_pushes_an_xid_long_before_the_batch_interval(
    tmp_path: Path, receiver: Receiver, wait_until: Callable[..., bool]
) -> None:
    agent = _agent(tmp_path, receiver.url)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        time.sleep(0.5)
        injected = time.monotonic()
        agent.collector.inject("xid", 0, xid=79)  # type: ignore[attr-defined]

        assert wait_until(lambda: any(_xids(p) for p in receiver.payloads()), timeout_s=10)
        first = next(r for r in receiver.requests if r.payload and _xids(r.payload))
        assert first.at - injected < LONG_BATCH_S / 4
        assert len(agent.spool) == 0
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.mark.parametrize("watch_s", [0.1, 0.0])
def test_between_samples_an_xid_is_sent_within_the_watch_interval_not_at_the_next_tick(
    tmp_path: Path, receiver: Receiver, wait_until: Callable[..., bool], watch_s: float
) -> None:
    sample_s = 4.0
    agent = _agent(tmp_path, receiver.url, interval_s=sample_s, watch_interval_s=watch_s)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: agent.samples_generated == 4, timeout_s=5)  # first round
        time.sleep(0.3)
        injected = time.monotonic()
        agent.collector.inject("xid", 0, xid=79)  # type: ignore[attr-defined]

        assert wait_until(lambda: any(_xids(p) for p in receiver.payloads()), timeout_s=10)
        first = next(r for r in receiver.requests if r.payload and _xids(r.payload))
        if watch_s:
            assert first.at - injected < 1.5
            assert agent.samples_generated == 8  # one early round, not a burst
        else:
            assert first.at - injected > sample_s - 0.3 - 1.0  # waited for the tick
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_source_whose_urgent_check_fails_counts_as_quiet_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(HostSource):
        name = "broken"

        def collect(self, now: datetime) -> dict[str, list[dict[str, Any]]]:
            return {}

        def urgent_pending(self) -> bool:
            raise OSError("cannot read")

    agent = Agent(
        AgentConfig(hostname="gpu-t-003", spool_dir=tmp_path),
        SimulatedCollector("gpu-t-003", 2),
        host_sources=[Broken()],
    )

    assert agent.urgent_pending() is False
    assert "broken: urgent check failed" in caplog.text
    agent.collector.inject("xid", 0, xid=48)  # type: ignore[attr-defined]
    assert agent.urgent_pending() is True


def test_an_urgent_batch_the_server_refuses_stays_spooled_and_arrives_after_the_backoff(
    tmp_path: Path, receiver: Receiver, wait_until: Callable[..., bool]
) -> None:
    receiver.script(Reply(503), Reply(503))
    agent = _agent(tmp_path, receiver.url)
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        agent.collector.inject("xid", 0, xid=79)  # type: ignore[attr-defined]

        assert wait_until(lambda: agent.batches_sent >= 1, timeout_s=10)
        assert agent.push_failures >= 2
        accepted = [r.payload for r in receiver.requests if r.payload is not None][-1]
        assert _xids(accepted) == [79]
        assert agent.batches_dropped == 0
    finally:
        stop.set()
        thread.join(timeout=10)


def _xids(payload: dict[str, object]) -> list[int]:
    events = payload.get("events") or []
    return [e["xid"] for e in events if isinstance(e, dict) and e.get("kind") == "xid"]  # type: ignore[misc]
