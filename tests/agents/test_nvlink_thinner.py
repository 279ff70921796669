"""NVLink readings go out every ``nvlink_interval_s`` and at once when a link changes."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from agents.nvlink_thinner import NvlinkThinner

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def links(**change: Any) -> list[dict[str, Any]]:
    base = {
        "gpu_uuid": "GPU-a",
        "state": "up",
        "speed_gbps": 26.562,
        "remote_pci_bus_id": "00000000:05:00.0",
        "remote_device_type": "nvswitch",
        "tx_bytes_per_s": 1.0,
        "rx_bytes_per_s": 2.0,
        "crc_errors": 0,
        "replay_errors": 0,
        "recovery_errors": 0,
    }
    out = [{**base, "link": n} for n in range(4)]
    out[2].update(change)
    return out


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_it_sends_the_first_round_then_every_interval_whatever_the_throughput() -> None:
    thinner = NvlinkThinner(30.0)
    sent = [thinner.due(links(tx_bytes_per_s=float(s)), at(s)) for s in range(0, 65, 5)]
    assert sent == [True, False, False, False, False, False, True] + [False] * 5 + [True]


def test_a_state_peer_or_error_counter_change_is_sent_at_once_and_resets_the_interval() -> None:
    thinner = NvlinkThinner(30.0)
    assert thinner.due(links(), at(0))
    assert not thinner.due(links(), at(5))
    assert thinner.due(links(state="down", speed_gbps=None), at(10))
    assert not thinner.due(links(state="down", speed_gbps=None), at(15))
    assert thinner.due(links(state="down", speed_gbps=None, crc_errors=7), at(20))
    assert thinner.due(links(state="up", remote_pci_bus_id="00000000:06:00.0"), at(25))
    assert not thinner.due(links(state="up", remote_pci_bus_id="00000000:06:00.0"), at(50))
    assert thinner.due(links(state="up", remote_pci_bus_id="00000000:06:00.0"), at(55))


def test_a_link_that_disappears_is_a_change() -> None:
    thinner = NvlinkThinner(30.0)
    assert thinner.due(links(), at(0))
    assert thinner.due(links()[:3], at(5))  # a GPU lost takes its links with it


def test_interval_zero_sends_every_round() -> None:
    thinner = NvlinkThinner(0.0)
    assert all(thinner.due(links(), at(s)) for s in range(0, 20, 5))


def test_the_agent_refuses_a_negative_interval_naming_the_option() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agents.main", "--nvlink-interval", "-1", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--nvlink-interval" in done.stderr
