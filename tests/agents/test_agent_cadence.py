"""The batch cadence: a batch is cut ``batch_interval_s`` after the previous cut, so when
rounds and batches share a period (10-s rounds and 10-s batches, the defaults before
``--batch-interval`` became 20 s) every round goes in a batch of its own, 10 s after the
last one — not every other round, which a round ending a few milliseconds earlier than the one
before (collection times jitter) used to cause: batches of 2-3 rounds every 20-30 s, the data
up to 20 s late. Scaled down here: 0.3-s rounds and batches."""

from __future__ import annotations

import time
from pathlib import Path

from agents.agent import Agent, AgentConfig
from agents.simulated.collector import SimulatedCollector

ROUND_S = 0.3
GPUS = 4


def _agent(spool: Path, **overrides: float) -> Agent:
    options = {"interval_s": ROUND_S, "batch_interval_s": ROUND_S}
    options.update(overrides)
    config = AgentConfig(hostname="gpu-c-001", spool_dir=spool, **options)  # type: ignore[arg-type]
    return Agent(config, SimulatedCollector("gpu-c-001", GPUS))


def test_each_round_is_its_own_batch_when_rounds_and_batches_share_a_period(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.collect()
    assert agent.batch_due() is False  # the first round opens the first window
    rounds_per_batch = []
    for _ in range(4):
        # The next round ends 20 ms earlier in its period than the last one did.
        time.sleep(ROUND_S - 0.02)
        agent.collect()
        assert agent.batch_due() is True
        payload = agent.take_payload()
        assert payload is not None
        rounds_per_batch.append(len({s["sampled_at"] for s in payload["samples"]}))
        assert len(payload["samples"]) == GPUS * rounds_per_batch[-1]
    assert rounds_per_batch == [2, 1, 1, 1]


def test_a_batch_waits_for_its_interval_to_half_a_round(tmp_path: Path) -> None:
    agent = _agent(tmp_path, interval_s=0.2, batch_interval_s=1.0)
    agent.collect()
    agent.take_payload()
    time.sleep(0.5)
    agent.collect()
    assert agent.batch_due() is False  # 0.5 s of a 1-s window; half a round is 0.1 s
    time.sleep(0.45)
    agent.collect()
    assert agent.batch_due() is True  # 0.95 s: within half a round of the interval


def test_an_empty_window_is_never_due(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.collect()
    agent.take_payload()
    time.sleep(ROUND_S * 2)
    assert agent.batch_due() is False  # nothing collected since the cut: nothing to send
    assert agent.take_payload() is None
