"""What Fleetwatch writes to and reads from Slurm: the drain reason (one line, prefixed,
bounded), ``scontrol show node -o`` lines of the states and reasons Slurm prints, ``squeue``
lines and the GPU indexes of ``scontrol show job -d``."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.remediation.slurm import (
    MAX_REASON,
    drain_command,
    parse_show_node,
    resume_command,
    slurm_reason,
)
from app.workloads.capture import overlaps
from app.workloads.records import JobRecord
from app.workloads.slurm_jobs import parse_gpu_indexes, parse_squeue

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


SEP = "\x1f"


def test_squeue_lines_become_jobs_and_odd_lines_are_skipped() -> None:
    text = "\n".join(
        [
            SEP.join(
                [
                    "41",
                    "alice",
                    "llm | pretrain",
                    "gpu",
                    "RUNNING",
                    "2026-12-05T00:38:35",
                    "NONE",
                    "dgx-07",
                ]
            ),
            SEP.join(
                [
                    "42_3",
                    "bob",
                    "array",
                    "gpu",
                    "FAILED",
                    "2026-12-05T00:30:00",
                    "2026-12-05T00:39:01",
                    "dgx-07",
                ]
            ),
            "slurm_load_jobs error: Socket timed out",
            SEP.join(["43", "carol", "later", "gpu", "PENDING", "N/A", "N/A", ""]),
            SEP * 7,
        ]
    )
    jobs = parse_squeue(text)
    assert [(j.job_id, j.name, j.state) for j in jobs] == [
        ("41", "llm | pretrain", "RUNNING"),
        ("42_3", "array", "FAILED"),
        ("43", "later", "PENDING"),
    ]
    assert jobs[0].started_at == datetime(2026, 12, 5, 0, 38, 35, tzinfo=UTC)
    assert jobs[0].ended_at is None and jobs[2].started_at is None
    assert jobs[1].ended_at == datetime(2026, 12, 5, 0, 39, 1, tzinfo=UTC)


def test_printed_times_that_are_estimates_are_no_start_or_end() -> None:
    line = SEP.join(
        ["41", "alice", "llm", "gpu", "{}", "2026-12-05T00:00:00", "2026-12-05T04:00:00", "n1"]
    )
    states = ("PENDING", "RUNNING", "TIMEOUT")
    pending, running, timed_out = parse_squeue("\n".join(line.format(s) for s in states))
    assert (pending.started_at, pending.ended_at) == (None, None)  # expected start, time limit
    assert running.started_at == datetime(2026, 12, 5, 0, 0, tzinfo=UTC)
    assert running.ended_at is None  # the time limit's end
    assert timed_out.ended_at == datetime(2026, 12, 5, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("detail", "gpus"),
    [
        (
            "JobId=41 Nodes=dgx-07 CPU_IDs=0-63 Mem=0 GRES=gpu:h100:4(IDX:0-3) MinCPUsNode=1",
            (0, 1, 2, 3),
        ),
        ("JobId=41 Nodes=dgx-07 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:1,5) MinCPUsNode=1", (1, 5)),
        ("JobId=41 Nodes=dgx-07 CPU_IDs=0 Mem=0 GRES=gpu:a100:3(IDX:0,2-3),nic:1 X=1", (0, 2, 3)),
        ("JobId=41 Nodes=dgx-07 CPU_IDs=0 Mem=0 GRES= MinCPUsNode=1", None),
        ("JobId=41 Nodes=dgx-08 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:7) MinCPUsNode=1", None),
        (  # -o puts every node's line on one; a host list names the node
            "JobId=41 Nodes=dgx-[05-07] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3),nic:1(IDX:0) "
            "Nodes=dgx-08 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1) MinCPUsNode=1",
            (3,),
        ),
        ("garbage", None),
    ],
)
def test_the_gpus_slurm_allocated_on_the_node(detail: str, gpus: tuple[int, ...] | None) -> None:
    assert parse_gpu_indexes(detail, "dgx-07") == gpus


def test_a_job_overlaps_an_incident_when_it_ran_during_it() -> None:
    t0 = datetime(2026, 12, 5, 0, 0, tzinfo=UTC)
    job = JobRecord("1", "u", "n", "p", "RUNNING", t0, None)
    start, end = t0 + timedelta(minutes=5), t0 + timedelta(minutes=6)
    assert overlaps(job, start, end)
    assert overlaps(replace(job, ended_at=start), start, end)
    assert not overlaps(replace(job, ended_at=start - timedelta(seconds=1)), start, end)
    assert not overlaps(replace(job, started_at=end + timedelta(seconds=1)), start, end)
    assert not overlaps(replace(job, started_at=None), start, end)
