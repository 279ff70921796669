"""What Fleetwatch writes to and reads from ``scontrol``: the drain reason (one line, prefixed,
bounded) and ``scontrol show node -o`` lines of the states and reasons Slurm prints."""

from __future__ import annotations

import pytest

from app.remediation.slurm import (
    MAX_REASON,
    drain_command,
    parse_show_node,
    resume_command,
    slurm_reason,
)

# Slurm 22.05's line (Debian 12), shortened in the middle.
LINE = (
    "NodeName=dgx-07 Arch=x86_64 CoresPerSocket=64  CPUAlloc=128 CPUEfctv=256 CPUTot=256 "
    "Gres=gpu:h100:8 NodeAddr=10.0.0.7 NodeHostName=dgx-07 Version=22.05.8 "
    "OS=Linux 6.1.0-13-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.55-1 (2023-09-29)  "
    "RealMemory=2000000 AllocMem=0 State={state} ThreadsPerCore=2 Partitions=gpu  "
    "CfgTRES=cpu=256,mem=2000000M,billing=256,gres/gpu=8 AllocTRES=cpu=128{reason}"
)


@pytest.mark.parametrize(
    ("state", "flags", "drained"),
    [
        ("IDLE", {"IDLE"}, False),
        ("MIXED+DRAIN", {"MIXED", "DRAIN"}, True),
        ("IDLE+DRAIN", {"IDLE", "DRAIN"}, True),
        ("DOWN*+DRAIN", {"DOWN", "DRAIN"}, True),
        ("ALLOCATED+DRAIN+COMPLETING", {"ALLOCATED", "DRAIN", "COMPLETING"}, True),
        ("IDLE+CLOUD+POWERED_DOWN", {"IDLE", "CLOUD", "POWERED_DOWN"}, False),
        ("DOWN+NOT_RESPONDING", {"DOWN", "NOT_RESPONDING"}, False),
    ],
)
def test_states_as_slurm_prints_them(state: str, flags: set[str], drained: bool) -> None:
    node = parse_show_node(LINE.format(state=state, reason=""))
    assert (node.name, node.state, node.flags, node.drained) == ("dgx-07", state, flags, drained)
    assert node.reason is None


@pytest.mark.parametrize(
    ("printed", "reason"),
    [
        (
            " Reason=fleetwatch: Xid 79 on GPU 3 [root@2026-12-05T00:28:31]",
            "fleetwatch: Xid 79 on GPU 3",
        ),
        (" Reason=a=b c=d [slurm@2026-12-05T00:28:31]", "a=b c=d"),
        (" Reason=Not responding", "Not responding"),
        (" Reason=[ops@2026-01-01T00:00:00]", None),
    ],
)
def test_the_reason_runs_to_the_end_of_the_line(printed: str, reason: str | None) -> None:
    node = parse_show_node(LINE.format(state="IDLE+DRAIN", reason=printed))
    assert node.reason == reason


@pytest.mark.parametrize(
    "text", ["", "garbage", "Node dgx-07 not found", "NodeName=dgx-07 Arch=x86_64"]
)
def test_output_without_a_node_state_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="scontrol output"):
        parse_show_node(text)


def test_the_drain_reason_is_one_prefixed_bounded_line() -> None:
    assert slurm_reason("Xid 79\non GPU 3\t(lost)") == "fleetwatch: Xid 79 on GPU 3 (lost)"
    long = slurm_reason("x" * 1000)
    assert len(long) == MAX_REASON and long.endswith("…")
    assert drain_command("/usr/bin/scontrol", "n1", "fan failed") == [
        "/usr/bin/scontrol",
        "update",
        "NodeName=n1",
        "State=DRAIN",
        "Reason=fleetwatch: fan failed",
    ]
    assert resume_command("scontrol", "n1") == ["scontrol", "update", "NodeName=n1", "State=RESUME"]
