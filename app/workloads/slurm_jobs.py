"""A node's Slurm jobs through ``squeue`` and ``scontrol show job -d``.

``squeue -t all`` lists the jobs running on a node and those that ended within the last
``MinJobAge`` seconds (300 by default), so a job the fault killed is still seen when the
capture runs soon after; ``sacct`` would see older ones but needs slurmdbd, which many
clusters run and this one may not. Times are asked in UTC (``TZ=UTC``: Slurm prints local time
without an offset). Fields are separated by the unit separator (U+001F), which job names do not
hold.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app.remediation import commands

SEP = "\x1f"
#: squeue fields: id, user, name, partition, state, start, end, node list.
FORMAT = SEP.join(("%i", "%u", "%j", "%P", "%T", "%S", "%e", "%N"))


@dataclass(frozen=True)
class SlurmJob:
    """One job as squeue prints it (times UTC, ``None`` for N/A, NONE or Unknown;
    ``started_at`` and ``ended_at`` ``None`` until it started and ended); ``gpu_indexes``: the
    node's GPUs allocated to it (``scontrol show job -d`` ``IDX``), or ``None`` where Slurm
    allocates no GPUs by index (no GRES configured: the whole node)."""

    job_id: str
    user: str
    name: str
    partition: str
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    gpu_indexes: tuple[int, ...] | None = None


def squeue_path(scontrol: str) -> str:
    """``squeue`` beside ``scontrol`` (the same Slurm installation), else on ``PATH``."""
    beside = Path(scontrol).with_name("squeue")
    return str(beside) if beside.parent != Path(".") and beside.exists() else "squeue"


def slurm_time(text: str) -> datetime | None:
    """A Slurm time printed under ``TZ=UTC`` (``2026-12-05T00:38:35``); ``None`` for
    ``N/A``, ``NONE``, ``Unknown`` or anything else."""
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


#: States of a job that ended: only for these is Slurm's end time the end. For the others
#: (``RUNNING``, ``PENDING``, ``SUSPENDED`` …) squeue's ``%e`` and scontrol's ``EndTime`` are
#: when the time limit would end it.
ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "COMPLETING",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "STAGE_OUT",
        "TIMEOUT",
    }
)


#: States of a job waiting to (re)start: its printed start time is Slurm's estimate.
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})


def started_at(state: str, start: datetime | None) -> datetime | None:
    """The job's start: ``None`` while it waits (:data:`WAITING_STATES`: Slurm prints when it
    expects to start it), else ``start``."""
    return None if state in WAITING_STATES else start


def ended_at(state: str, end: datetime | None) -> datetime | None:
    """The job's end: ``end`` where ``state`` is one of :data:`ENDED_STATES`, else ``None``
    (Slurm printed a time limit, not an end)."""
    return end if state in ENDED_STATES else None


def parse_squeue(text: str) -> list[SlurmJob]:
    """The jobs of ``squeue -h -o FORMAT`` output; a line of the wrong shape is skipped (one
    odd line never hides the others)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) != 8 or not parts[0].strip():
            continue
        job_id, user, name, partition, state, start, end, _nodes = (p.strip() for p in parts)
        jobs.append(
            SlurmJob(
                job_id,
                user,
                name,
                partition,
                state,
                started_at(state, slurm_time(start)),
                ended_at(state, slurm_time(end)),
            )
        )
    return jobs


_NODE_GRES = re.compile(r"(?:^|\s)Nodes=(\S+)\s.*?\sGRES=(\S*)")
_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)")


def parse_gpu_indexes(text: str, node: str) -> tuple[int, ...] | None:
    """The GPU indexes ``scontrol show job -d -o`` gives the job on ``node`` (``GRES=gpu:h100:
    4(IDX:0-3)``), or ``None`` where it names none."""
    for match in _NODE_GRES.finditer(text):
        nodes, gres = match.group(1), match.group(2)
        if node not in _expand_simple(nodes):
            continue
        found: set[int] = set()
        for idx in _IDX.findall(gres):
            for part in idx.split(","):
                low, _, high = part.partition("-")
                if low.isdigit() and (not high or high.isdigit()):
                    found.update(range(int(low), int(high or low) + 1))
        return tuple(sorted(found)) or None
    return None


def _expand_simple(nodes: str) -> set[str]:
    # A host list such as "dgx-[01-03]" is not expanded: the exact name, or the whole list text.
    return {nodes, *nodes.split(",")}


def jobs_on_node(
    scontrol: str, node: str, *, timeout_s: float
) -> tuple[list[SlurmJob], str | None]:
    """The node's jobs (running, and ended within ``MinJobAge``), each with its GPU indexes;
    and an error text where squeue failed (then the list is empty)."""
    env = {**os.environ, "TZ": "UTC"}
    listed = commands.run(
        [squeue_path(scontrol), "-h", "-t", "all", "-w", node, "-o", FORMAT],
        timeout_s=timeout_s,
        env=env,
    )
    if not listed.ok:
        return [], listed.output or f"squeue exited {listed.returncode}"
    jobs = []
    for job in parse_squeue(listed.stdout):
        detail = commands.run(
            [scontrol, "show", "job", "-d", "-o", job.job_id], timeout_s=timeout_s, env=env
        )
        gpus = parse_gpu_indexes(detail.stdout, node) if detail.ok else None
        jobs.append(SlurmJob(**{**job.__dict__, "gpu_indexes": gpus}))
    return jobs, None
