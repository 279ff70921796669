"""A node's Slurm jobs through ``squeue`` and ``scontrol show job -d``.

``squeue -t all`` lists the jobs running on a node and those that ended within the last
``MinJobAge`` seconds (300 by default), so a job the fault killed is still seen when the
capture runs soon after; ``sacct`` would see older ones but needs slurmdbd, which many
clusters run and this one may not. Times are asked in UTC (``TZ=UTC``: Slurm prints local time
without an offset). Fields are separated by the unit separator (U+001F), which job names do not
hold.

A job's own page reads ``scontrol show job -d <id>`` (:func:`show_job`) in its multi-line form,
where the job name runs to the end of the first line (a name with spaces or ``=`` is read
whole), and the nodes of each ``Nodes=<host list> … GRES=gpu:…(IDX:…)`` line are expanded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from app.remediation import commands
from app.workloads.hostlist import expand_hostlist
from app.workloads.records import JobRecord

SEP = "\x1f"
#: A job id as squeue prints one job: digits, with ``_N`` (an array's task) or ``+N`` (a
#: heterogeneous job's component).
JOB_ID_PATTERN = r"^[0-9]{1,20}(_[0-9]{1,10}|\+[0-9]{1,10})?$"

#: squeue fields: id, user, name, partition, state, start, end, node list.
FORMAT = SEP.join(("%i", "%u", "%j", "%P", "%T", "%S", "%e", "%N"))


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


def parse_squeue(text: str) -> list[JobRecord]:
    """The jobs of ``squeue -h -o FORMAT`` output; a line of the wrong shape is skipped (one
    odd line never hides the others)."""
    jobs = []
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) != 8 or not parts[0].strip():
            continue
        job_id, user, name, partition, state, start, end, _nodes = (p.strip() for p in parts)
        jobs.append(
            JobRecord(
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


@dataclass(frozen=True)
class JobNode:
    """A node a job ran on: its Slurm ``NodeName`` and the node's GPUs allocated to the job
    (``None``: none by index, the whole node)."""

    name: str
    gpu_indexes: tuple[int, ...] | None


_NODES = re.compile(r"(?:^|\s)Nodes=(\S+)")
# GRES_IDX= is how older Slurm releases printed it.
_GRES = re.compile(r"(?:^|\s)GRES(?:_IDX)?=(\S*)")
# A gpu entry of a GRES value and its IDX: "gpu:a100:4(IDX:0-3)", "gpu(IDX:1)"; not "nic:1(IDX:0)".
_GPU_IDX = re.compile(r"(?:^|,)gpu[^(,]*(?:\((?!IDX:)[^)]*\))*\(IDX:([^)]*)\)")


def gres_gpu_indexes(gres: str) -> tuple[int, ...] | None:
    """The GPU indexes of a per-node ``GRES=`` value (``gpu:a100:3(IDX:0,2-3),nic:1``:
    0, 2, 3), or ``None`` where it names none (empty, no IDX, ``IDX:N/A``)."""
    found: set[int] = set()
    for idx in _GPU_IDX.findall(gres):
        for part in idx.split(","):
            low, dash, high = part.partition("-")
            if low.isdigit() and (not dash or high.isdigit()):
                found.update(range(int(low), int(high if dash else low) + 1))
    return tuple(sorted(found)) or None


def node_gres(text: str) -> list[JobNode]:
    """Each node of the per-node lines of ``scontrol show job -d`` (either form, ``-o`` or
    not): ``Nodes=gpu-[01-03] CPU_IDs=0-63 Mem=0 GRES=gpu:a100:4(IDX:0-3)`` gives gpu-01,
    gpu-02 and gpu-03, each with GPUs 0-3."""
    found = []
    starts = list(_NODES.finditer(text))
    for i, match in enumerate(starts):
        stop = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        line = text[match.end() : stop].split("\n", 1)[0]
        gres = _GRES.search(line)
        gpus = gres_gpu_indexes(gres.group(1)) if gres else None
        found += [JobNode(name, gpus) for name in expand_hostlist(match.group(1))]
    return found


def parse_gpu_indexes(text: str, node: str) -> tuple[int, ...] | None:
    """The GPU indexes ``scontrol show job -d`` gives the job on ``node`` (``GRES=gpu:h100:
    4(IDX:0-3)``), or ``None`` where it names none."""
    return next((n.gpu_indexes for n in node_gres(text) if n.name == node), None)


@dataclass(frozen=True)
class JobDetail:
    """One job as ``scontrol show job -d`` shows it: ``job`` (its ``gpu_indexes`` unused) and
    the nodes it holds or held, in Slurm's order."""

    job: JobRecord
    nodes: tuple[JobNode, ...]


_FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")


def _record(text: str) -> JobDetail | None:
    first, _, rest = text.partition("\n")
    if not first.startswith("JobId="):
        return None
    head, _, name = first.partition(" JobName=")
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(head + "\n" + rest):
        fields.setdefault(key, value)
    if "ArrayTaskId" in fields and "ArrayJobId" in fields:
        task = fields["ArrayTaskId"]
        job_id = f"{fields['ArrayJobId']}_{task if task.isdigit() else f'[{task}]'}"
    elif "HetJobOffset" in fields and "HetJobId" in fields:
        job_id = f"{fields['HetJobId']}+{fields['HetJobOffset']}"
    else:
        job_id = fields["JobId"]
    state = fields.get("JobState", "")
    held = {n.name: n.gpu_indexes for n in node_gres(rest)}
    listed = expand_hostlist(fields.get("NodeList", ""))
    nodes = tuple(JobNode(n, held.get(n)) for n in dict.fromkeys([*listed, *held]))
    job = JobRecord(
        job_id=job_id,
        user=fields.get("UserId", "").split("(", 1)[0],
        name=name.rstrip(),
        partition=fields.get("Partition", ""),
        state=state,
        started_at=started_at(state, slurm_time(fields.get("StartTime", ""))),
        ended_at=ended_at(state, slurm_time(fields.get("EndTime", ""))),
    )
    return JobDetail(job, nodes)


def parse_show_job(text: str) -> list[JobDetail]:
    """The jobs of ``scontrol show job -d`` output (multi-line form, records separated by a
    blank line: a heterogeneous job's components, an array's tasks); text that is no record
    is skipped. A job id is given as squeue prints it (``41``, ``42_3``, ``43+1``)."""
    records = (_record(r.strip("\n")) for r in re.split(r"\n[ \t]*\n", text))
    return [r for r in records if r is not None]


def merge(details: list[JobDetail], *, job_id: str) -> JobDetail:
    """The records one job id names as one job: the record of that id where there is one,
    else (a heterogeneous job's components, an array's tasks) their nodes together, from the
    first start to the last end (``None`` while one runs), their distinct states joined."""
    exact = [d for d in details if d.job.job_id == job_id]
    if exact or len(details) == 1:
        return (exact or details)[0]
    held: dict[str, set[int] | None] = {}
    for node in (n for d in details for n in d.nodes):
        before = held.get(node.name, set())
        none = before is None or node.gpu_indexes is None
        held[node.name] = None if none else {*(before or ()), *(node.gpu_indexes or ())}
    starts = [d.job.started_at for d in details if d.job.started_at is not None]
    ends = [d.job.ended_at for d in details]
    first = details[0].job
    job = JobRecord(
        job_id=job_id,
        user=first.user,
        name=first.name,
        partition=",".join(dict.fromkeys(d.job.partition for d in details)),
        state=",".join(dict.fromkeys(d.job.state for d in details)),
        started_at=min(starts, default=None),
        ended_at=None if None in ends else max(e for e in ends if e is not None),
    )
    nodes = (JobNode(n, None if g is None else tuple(sorted(g))) for n, g in held.items())
    return JobDetail(job, tuple(nodes))


#: What scontrol prints for a job it does not know (never was, or ended past ``MinJobAge``).
UNKNOWN_JOB = "Invalid job id specified"


@dataclass(frozen=True)
class JobLookup:
    """What Slurm said of a job: ``detail``, or neither (it does not know the job), or
    ``error`` (scontrol failed: controller down, no answer in time)."""

    detail: JobDetail | None = None
    error: str | None = None


def show_job(scontrol: str, job_id: str, *, timeout_s: float) -> JobLookup:
    """Ask Slurm for job ``job_id`` (``scontrol show job -d``, times in UTC); never raises."""
    env = {**os.environ, "TZ": "UTC"}
    shown = commands.run([scontrol, "show", "job", "-d", job_id], timeout_s=timeout_s, env=env)
    if not shown.ok and UNKNOWN_JOB in shown.output:
        return JobLookup()
    if not shown.ok:
        return JobLookup(error=shown.output or f"scontrol exited {shown.returncode}")
    details = parse_show_job(shown.stdout)
    if not details:
        return JobLookup()
    return JobLookup(detail=merge(details, job_id=job_id))


def jobs_on_node(
    scontrol: str, node: str, *, timeout_s: float
) -> tuple[list[JobRecord], str | None]:
    """The node's jobs (running, and ended within ``MinJobAge``), each with its GPU indexes
    (``scontrol show job -d`` ``IDX``; ``None`` where Slurm allocates none by index: the whole
    node); and an error text where squeue failed (then the list is empty)."""
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
        jobs.append(replace(job, gpu_indexes=gpus))
    return jobs, None
