"""NVLink readings go out every ``nvlink_interval_s`` and at once when a link changes."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

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


def sent(thinner: NvlinkThinner, entries: list[dict[str, Any]], seconds: float) -> list[int]:
    """The link numbers sent in a round."""
    return [e["link"] for e in thinner.due(entries, at(seconds))]


def test_it_sends_every_link_first_then_every_interval_whatever_the_throughput() -> None:
    thinner = NvlinkThinner(30.0)
    rounds = [sent(thinner, links(tx_bytes_per_s=float(s)), s) for s in range(0, 65, 5)]
    every = [0, 1, 2, 3]
    assert rounds == [every, [], [], [], [], [], every] + [[]] * 5 + [every]


def test_a_changed_link_is_sent_alone_at_once_and_the_interval_keeps_its_pace() -> None:
    thinner = NvlinkThinner(30.0)
    assert sent(thinner, links(), 0) == [0, 1, 2, 3]
    assert sent(thinner, links(), 5) == []
    assert sent(thinner, links(state="down", speed_gbps=None), 10) == [2]
    assert sent(thinner, links(state="down", speed_gbps=None), 15) == []
    # A down link whose error counters keep rising costs one row a round, not every link.
    assert sent(thinner, links(state="down", speed_gbps=None, crc_errors=7), 20) == [2]
    assert sent(thinner, links(state="down", speed_gbps=None, crc_errors=9), 25) == [2]
    assert sent(thinner, links(state="up", remote_pci_bus_id="00000000:06:00.0"), 30) == [
        0,
        1,
        2,
        3,
    ]
    assert sent(thinner, links(state="up", remote_pci_bus_id="00000000:06:00.0"), 35) == []


def test_a_state_change_or_a_vanished_link_is_urgent_and_counters_alone_are_not() -> None:
    thinner = NvlinkThinner(30.0)
    urgent = []
    for seconds, entries in [
        (0, links()),  # first round: nothing to compare with
        (5, links(crc_errors=4)),  # sent (counter changed) but not urgent
        (10, links(state="down", speed_gbps=None)),
        (15, links(state="down", speed_gbps=None)),
        (20, links()),  # back up
        (25, links()[:3]),  # link 3 vanished (its GPU lost)
        (30, links()[:3]),
        (35, []),  # every link gone
    ]:
        thinner.due(entries, at(seconds))
        urgent.append(thinner.urgent)
    assert urgent == [False, False, True, False, True, True, False, True]


def test_a_link_that_appears_is_sent() -> None:
    thinner = NvlinkThinner(30.0)
    assert sent(thinner, links()[:3], 0) == [0, 1, 2]
    assert sent(thinner, links(), 5) == [3]  # a GPU's links back


def test_interval_zero_sends_every_round() -> None:
    thinner = NvlinkThinner(0.0)
    assert all(sent(thinner, links(), s) == [0, 1, 2, 3] for s in range(0, 20, 5))


def test_an_interval_beyond_a_day_is_refused() -> None:
    with pytest.raises(ValueError, match="0 to 86400"):
        NvlinkThinner(1e30)


@pytest.mark.parametrize("bad", ["-1", "abc", "inf", "nan", "1e30", "86401"])
def test_the_agent_refuses_a_bad_interval_naming_the_option(bad: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agents.main", f"--nvlink-interval={bad}", "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--nvlink-interval" in done.stderr


def test_print_shows_the_nvlinks_although_the_priming_round_read_them() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agents.main", "--collector", "sim", "--once", "--print"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["nvlinks"]) == 8 * 18  # the simulated HGX node


def test_full_rounds_keep_their_schedule_when_samples_come_a_little_early() -> None:
    thinner = NvlinkThinner(60.0)
    full = [
        5 * n
        for n in range(0, 24 * 12 + 1)
        if len(thinner.due(links(), at(5 * n - 0.002 * (n > 0)))) == 4
    ]
    assert full == list(range(0, 24 * 60 + 1, 60))


def test_a_schedule_needs_a_positive_interval() -> None:
    from agents.send_schedule import FullRounds

    with pytest.raises(ValueError, match="positive"):
        FullRounds(timedelta(0))
