"""Host readings go out every ``host_interval_s`` as the mean of the rounds read since, and at
once when an IB port's state or a mount changes."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agents.agent import Agent, AgentConfig
from agents.host_thinner import HostThinner, averaged
from agents.simulated.collector import SimulatedCollector
from agents.simulated.host import SimulatedHostSource

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def port(n: int = 1, **change: Any) -> dict[str, Any]:
    entry = {
        "sampled_at": "x",
        "device": f"mlx5_{n}",
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400.0,
        "tx_bytes_per_s": 100.0,
        "rx_bytes_per_s": 200.0,
        "symbol_error_count": 0,
        "link_downed_count": 0,
        "link_error_recovery_count": 0,
    }
    entry.update(change)
    return entry


def disk(read: float, wait: float | None = 0.001) -> dict[str, Any]:
    return {"device": "nvme0n1", "read_bytes_per_s": read, "busy_pct": 10.0, "avg_wait_s": wait}


def test_everything_is_sent_first_then_once_per_interval_with_rates_averaged_over_it() -> None:
    thinner = HostThinner(30.0)
    rounds = []
    for seconds, read in [(0, 50.0), (5, 100.0), (10, 300.0), (20, 500.0), (30, 900.0)]:
        rounds.append(thinner.due({"disks": [disk(read)], "nic_ports": [port()]}, at(seconds)))

    assert [sorted(r) for r in rounds] == [
        ["disks", "nic_ports"],
        [],
        [],
        [],
        ["disks", "nic_ports"],
    ]
    # Each round's rate covers the time since the round before: 5 s at 100, 5 s at 300,
    # 10 s at 500, 10 s at 900 → (500 + 1500 + 5000 + 9000) / 30 s.
    sent = rounds[-1]["disks"][0]
    assert sent["read_bytes_per_s"] == pytest.approx(16000 / 30)
    assert sent["busy_pct"] == pytest.approx(10.0) and sent["avg_wait_s"] == pytest.approx(0.001)
    assert rounds[-1]["nic_ports"][0]["tx_bytes_per_s"] == pytest.approx(100.0)


def test_a_port_going_down_is_sent_alone_at_once_and_is_urgent() -> None:
    thinner = HostThinner(60.0)
    thinner.due({"nic_ports": [port(0), port(1)]}, at(0))
    assert thinner.due({"nic_ports": [port(0), port(1)]}, at(5)) == {}
    assert thinner.urgent is False

    down = thinner.due(
        {"nic_ports": [port(0), port(1, state="DOWN", phys_state="Polling")]}, at(10)
    )

    assert [(p["device"], p["state"]) for p in down["nic_ports"]] == [("mlx5_1", "DOWN")]
    assert thinner.urgent is True
    assert (
        thinner.due({"nic_ports": [port(0), port(1, state="DOWN", phys_state="Polling")]}, at(15))
        == {}
    )
    assert thinner.urgent is False


def test_a_vanished_entity_is_urgent_and_a_new_one_is_sent_at_once() -> None:
    thinner = HostThinner(60.0)
    thinner.due({"nic_ports": [port(0), port(1)]}, at(0))
    thinner.due({"nic_ports": [port(0)]}, at(5))
    assert thinner.urgent is True
    again = thinner.due({"nic_ports": [port(0), port(1)]}, at(10))
    assert [p["device"] for p in again["nic_ports"]] == ["mlx5_1"]


def test_counters_and_unknown_sections_pass_as_read_and_none_stays_none() -> None:
    thinner = HostThinner(60.0)
    first = thinner.due({"disks": [disk(10.0, wait=None)], "extra": [{"a": 1}]}, at(0))
    assert first["disks"][0]["avg_wait_s"] is None and first["extra"] == [{"a": 1}]
    assert averaged("tx_bytes_per_s") and averaged("busy_pct") and averaged("avg_rtt_s")
    assert not averaged("symbol_error_count") and not averaged("read_bytes")


def test_interval_zero_sends_every_round_as_read_and_a_bad_interval_is_refused() -> None:
    thinner = HostThinner(0.0)
    assert all(
        thinner.due({"disks": [disk(float(s))]}, at(s))["disks"][0]["read_bytes_per_s"] == s
        for s in range(0, 20, 5)
    )
    with pytest.raises(ValueError, match="host interval"):
        HostThinner(86401.0)


def test_the_agent_sends_host_sections_once_a_minute_and_an_ib_port_down_at_once(
    tmp_path: Path,
) -> None:
    collector = SimulatedCollector("gpu-h-001", 8)
    host = SimulatedHostSource(collector)
    agent = Agent(
        AgentConfig(hostname="gpu-h-001", spool_dir=tmp_path, batch_interval_s=3600.0),
        collector,
        host_sources=[host],
    )
    for seconds in range(0, 65, 5):
        agent.collect(at(seconds))
    payload = agent.take_payload()
    assert payload is not None
    times = sorted({p["sampled_at"] for p in payload["nic_ports"]})
    assert len(times) == 2 and len(payload["nic_ports"]) == 16  # at 0 s and at 60 s
    assert agent.batch_due() is False

    host.inject("ib_port_down", index=3, duration_s=600)
    agent.collect(at(65))

    assert agent.batch_due() is True
    urgent = agent.take_payload()
    assert urgent is not None
    assert [(p["device"], p["state"]) for p in urgent["nic_ports"]] == [("mlx5_3", "DOWN")]


def test_the_agent_refuses_a_bad_host_interval_naming_the_option() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agents", "--collector", "sim", "--host-interval=-1", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--host-interval" in done.stderr and "must be 0 to 86400 seconds" in done.stderr


def test_latencies_are_weighted_by_operations_not_by_time() -> None:
    # One slow I/O in an idle round among busy fast rounds is not a minute of slow disk, and
    # a burst of slow I/O among idle rounds is not hidden (what a reader over 60 s computes).
    thinner = HostThinner(60.0)
    thinner.due({"disks": [{"device": "sda", "read_iops": 2000.0, "write_iops": 0.0}]}, at(0))
    idle_slow = {"device": "sda", "read_iops": 0.2, "write_iops": 0.0, "avg_wait_s": 2.0}
    busy_fast = {"device": "sda", "read_iops": 2000.0, "write_iops": 0.0, "avg_wait_s": 0.001}
    for seconds in range(5, 60, 5):
        thinner.due({"disks": [idle_slow if seconds == 30 else busy_fast]}, at(seconds))
    sent = thinner.due({"disks": [busy_fast]}, at(60))["disks"][0]
    expected = (2.0 * 0.2 + 0.001 * 2000 * 11) / (0.2 + 2000 * 11)
    assert sent["avg_wait_s"] == pytest.approx(expected)
    assert sent["avg_wait_s"] < 0.002


def test_odd_values_and_entries_never_raise_and_never_spoil_a_mean() -> None:
    thinner = HostThinner(60.0)
    rounds: list[list[Any]] = [
        [disk(100.0), None, "garbage", {"device": ["sda"], "read_bytes_per_s": 1.0}],
        [disk(float("nan")), {"device": "sdb", "read_bytes_per_s": 10**400}],
        [disk(100.0), {"device": "sdb", "read_bytes_per_s": True}],
        [{**disk(100.0), "read_bytes_per_s": None}],
    ]
    sent = {}
    for i, entries in enumerate([*rounds, [disk(100.0)]]):
        sent = thinner.due({"disks": entries, "mounts": "not a list"}, at(15 * i))
    (sda,) = [e for e in sent["disks"] if isinstance(e, dict) and e.get("device") == "nvme0n1"]
    assert sda["read_bytes_per_s"] == pytest.approx(100.0)  # NaN and None rounds left out
    assert sent["mounts"] == "not a list"


def test_full_rounds_keep_a_60_s_schedule_when_samples_come_a_little_early() -> None:
    thinner = HostThinner(60.0)
    full_at = []
    for n in range(0, 24 * 12 + 1):  # two hours of 5-s rounds, each 2 ms early
        moment = at(5 * n - (0.002 if n else 0.0))
        if thinner.due({"disks": [disk(1.0)]}, moment):
            full_at.append(round(5 * n))
    assert full_at == list(range(0, 24 * 60 + 1, 60))


def test_an_entity_back_after_a_gap_starts_a_new_mean_and_gone_ones_are_forgotten() -> None:
    thinner = HostThinner(60.0)
    sdb = {"device": "sdb", "read_bytes_per_s": 1000.0}
    thinner.due({"disks": [disk(1.0), sdb]}, at(0))
    thinner.due({"disks": [disk(1.0), sdb]}, at(5))
    for seconds in range(10, 3600, 5):
        thinner.due({"disks": [disk(1.0)]}, at(seconds))
    assert ("disks", "sdb") not in thinner._pending
    back = thinner.due({"disks": [disk(1.0), {**sdb, "read_bytes_per_s": 0.0}]}, at(3605))
    assert [e["read_bytes_per_s"] for e in back["disks"] if e["device"] == "sdb"] == [0.0]


def test_a_thinner_failure_sends_the_round_as_read_and_the_agent_goes_on(tmp_path: Path) -> None:
    class Broken(HostThinner):
        def due(self, sections: dict[str, Any], now: datetime) -> dict[str, list[Any]]:
            raise RuntimeError("boom")

    collector = SimulatedCollector("gpu-h-002", 8)
    agent = Agent(
        AgentConfig(hostname="gpu-h-002", spool_dir=tmp_path, batch_interval_s=3600.0),
        collector,
        host_sources=[SimulatedHostSource(collector)],
    )
    agent._host = Broken(60.0)
    assert agent.collect(at(0)) == 8
    payload = agent.take_payload()
    assert payload is not None and len(payload["nic_ports"]) == 8
    assert payload["collection"]["errors"] == [
        {"source": "host-interval", "message": "RuntimeError('boom')"}
    ]


def test_an_interval_below_a_microsecond_means_every_round() -> None:
    thinner = HostThinner(1e-9)  # timedelta rounds it to 0
    assert all(thinner.due({"disks": [disk(1.0)]}, at(s)) for s in range(3))
