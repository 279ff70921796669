"""A job's page and API answer (app.workloads): ``scontrol show job -d`` read as Slurm prints
it (host lists, GRES IDX forms, array tasks and heterogeneous components); Slurm's node names
mapped to Fleetwatch's nodes; a job Slurm does not answer for shown as incidents captured it,
with its GPUs' events and the node's incidents during its run, on Postgres and SQLite through
a real server; 404, 422 and 503 naming what went wrong; the incident page links its jobs
here. The real Slurm: tests/e2e/test_slurm_job_page.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.db import session_scope
from app.fleet.models import Node
from app.remediation import service as remediation
from app.workloads.hostlist import expand_hostlist
from app.workloads.models import IncidentJob, WorkloadCapture
from app.workloads.slurm_jobs import JobNode, gres_gpu_indexes, merge, parse_show_job
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import LiveServer

T0 = datetime(2026, 12, 5, 0, 38, 35, tzinfo=UTC)


def show_job(
    first: str, *, state: str, nodes: str, per_node: list[str], end: str = "Unknown"
) -> str:
    """One record of ``scontrol show job -d`` as Slurm 22.05 prints it, shortened."""
    return "\n".join(
        [
            first,
            "   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A",
            f"   JobState={state} Reason=None Dependency=(null)",
            "   RunTime=00:10:00 TimeLimit=1-00:00:00 TimeMin=N/A",
            f"   StartTime=2026-12-05T00:38:35 EndTime={end} Deadline=N/A",
            "   Partition=gpu AllocNode:Sid=login-01:5245",
            "   ReqNodeList=(null) ExcNodeList=(null)",
            f"   NodeList={nodes}",
            "   NumNodes=4 NumCPUs=224 NumTasks=4 CPUs/Task=1 ReqB:S:C:T=0:0:*:*",
            "   JOB_GRES=gpu:14",
            *[f"     {line}" for line in per_node],
            "   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0",
            "   Command=/home/alice/train.sh",
            "   Power=",
            "   ",
            "",
        ]
    )


MULTI_NODE = show_job(
    "JobId=4242 JobName=llm pretrain lr=3e-4",
    state="RUNNING",
    nodes="gpu-[01-03,07]",
    per_node=[
        "Nodes=gpu-[01-03] CPU_IDs=0-63 Mem=512000 GRES=gpu:a100:4(IDX:0-3)",
        "Nodes=gpu-07 CPU_IDs=0-31 Mem=256000 GRES=gpu:2(IDX:0,2)",
    ],
    end="2026-12-06T00:38:35",  # the time limit's end: it still runs
)


def test_a_multi_node_job_has_each_node_of_its_host_list_with_its_gpus() -> None:
    (detail,) = parse_show_job(MULTI_NODE)
    job = detail.job
    assert (job.job_id, job.name, job.user, job.partition, job.state) == (
        "4242",
        "llm pretrain lr=3e-4",
        "alice",
        "gpu",
        "RUNNING",
    )
    assert (job.started_at, job.ended_at) == (T0, None)
    assert detail.nodes == (
        JobNode("gpu-01", (0, 1, 2, 3)),
        JobNode("gpu-02", (0, 1, 2, 3)),
        JobNode("gpu-03", (0, 1, 2, 3)),
        JobNode("gpu-07", (0, 2)),
    )


def test_a_job_without_gres_holds_its_node_whole_and_an_array_task_is_named_as_squeue() -> None:
    text = show_job(
        "JobId=3 ArrayJobId=2 ArrayTaskId=1 JobName=wrap",
        state="COMPLETED",
        nodes="fw-gpu-01",
        per_node=["Nodes=fw-gpu-01 CPU_IDs=1 Mem=0 GRES="],
        end="2026-12-05T00:48:35",
    )
    (detail,) = parse_show_job(text)
    assert detail.job.job_id == "2_1"
    assert detail.job.ended_at == T0 + timedelta(minutes=10)
    assert detail.nodes == (JobNode("fw-gpu-01", None),)


def test_a_pending_job_has_no_start_and_no_node() -> None:
    (detail,) = parse_show_job(
        show_job("JobId=9 JobName=later", state="PENDING", nodes="", per_node=[])
    )
    assert (detail.job.started_at, detail.nodes) == (None, ())


def test_a_heterogeneous_jobs_components_are_one_job_unless_one_is_named() -> None:
    text = show_job(
        "JobId=5 HetJobId=5 HetJobOffset=0 JobName=mpi",
        state="RUNNING",
        nodes="gpu-01",
        per_node=["Nodes=gpu-01 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3)"],
    ) + show_job(
        "JobId=6 HetJobId=5 HetJobOffset=1 JobName=mpi",
        state="COMPLETED",
        nodes="gpu-[01-02]",
        per_node=["Nodes=gpu-[01-02] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)"],
        end="2026-12-05T01:00:00",
    )
    details = parse_show_job("garbage\n\n" + text)
    assert [d.job.job_id for d in details] == ["5+0", "5+1"]
    whole = merge(details, job_id="5")
    assert (whole.job.job_id, whole.job.state, whole.job.ended_at) == (
        "5",
        "RUNNING,COMPLETED",
        None,
    )
    assert whole.nodes == (JobNode("gpu-01", (0, 3)), JobNode("gpu-02", (0,)))
    assert merge(details, job_id="5+1").nodes == (JobNode("gpu-01", (0,)), JobNode("gpu-02", (0,)))


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:a100:4(IDX:0-3)", (0, 1, 2, 3)),
        ("gpu:2(IDX:0,2)", (0, 2)),
        ("gpu:a100:3(IDX:0,2-3),nic:1", (0, 2, 3)),
        ("gpu:a100:1(IDX:0),gpu:v100:1(IDX:3)", (0, 3)),
        ("gpu:h100:2(S:0)(IDX:4-5)", (4, 5)),
        ("gpu(IDX:1)", (1,)),  # as older releases printed GRES_IDX=
        ("nic:2(IDX:0-1)", None),
        ("gpu:1(IDX:N/A)", None),
        ("gpu:2", None),
        ("", None),
    ],
)
def test_the_gpu_indexes_of_a_gres_value(gres: str, gpus: tuple[int, ...] | None) -> None:
    assert gres_gpu_indexes(gres) == gpus


@pytest.mark.parametrize(
    ("hosts", "names"),
    [
        ("gpu-[01-03,07]", ["gpu-01", "gpu-02", "gpu-03", "gpu-07"]),
        ("rack[1-2]-n[8-10]", [f"rack{r}-n{n}" for r in (1, 2) for n in (8, 9, 10)]),
        ("a,b[1-2],dgx-07.lab", ["a", "b1", "b2", "dgx-07.lab"]),
        ("n[1-2],n1", ["n1", "n2"]),
        ("", []),
        ("(null)", []),
        ("n[3-1]", ["n[3-1]"]),  # not a list Slurm prints: shown as it is
        ("n[1-", ["n[1-"]),
        ("n[1-99999999]", ["n[1-99999999]"]),
    ],
)
def test_slurm_host_lists_expand_as_scontrol_show_hostnames(hosts: str, names: list[str]) -> None:
    assert expand_hostlist(hosts) == names


def test_a_slurm_node_name_maps_to_the_node_by_label_else_short_hostname(db_url: str) -> None:
    seen = datetime.now(UTC)
    with session_factory(db_url) as factory, session_scope(factory) as session:
        for hostname, labels, last_seen in [
            ("dgx07.lab.example", {"slurm_node": "gpu-07"}, seen),
            ("gpu-07.old.example", {}, seen - timedelta(days=9)),  # same name, seen before
            ("gpu-08.lab.example", {}, seen),
            ("gpu-0", {}, seen),
        ]:
            session.add(
                Node(hostname=hostname, labels=labels, created_at=seen, last_seen_at=last_seen)
            )
        session.flush()
        found = remediation.nodes_by_slurm_name(session, names=["gpu-07", "gpu-08", "gpu-09"])
        assert {name: n.hostname for name, n in found.items()} == {
            "gpu-07": "dgx07.lab.example",
            "gpu-08": "gpu-08.lab.example",
        }


# --- through a real server: a job as incidents captured it --------------------------------


def send(url: str, token: str, payload: dict[str, Any]) -> None:
    response = post_batch(url, token, payload)
    assert response.status_code == 200, response.text


def capture(url: str, incident_id: int, **job: Any) -> None:
    """Store what the capture of ``incident_id`` would have (node-a, one job)."""
    with session_factory(url) as factory, session_scope(factory) as session:
        if session.get(WorkloadCapture, (incident_id, "slurm")) is None:
            session.add(
                WorkloadCapture(
                    incident_id=incident_id,
                    captured_at=datetime.now(UTC),
                    system="slurm",
                    target="node-a",
                )
            )
        session.add(IncidentJob(incident_id=incident_id, system="slurm", **job))


@pytest.fixture
def captured(server: LiveServer, db_url: str) -> dict[str, Any]:
    """:func:`seed_captured` on the test server."""
    return seed_captured(server.url, db_url)


def seed_captured(url: str, db_url: str) -> dict[str, Any]:
    """node-a with 4 GPUs; job 4242 (GPUs 1 and 2) running for 10 minutes and array task
    4243_7 (the whole node), as an incident captured them; during the run an Xid 79 on GPU 1,
    an Xid 48 on GPU 3 and an Xid naming no GPU; before it an Xid 13 on GPU 2."""
    now = datetime.now(UTC)
    gpus = [gpu(i) for i in range(4)]

    def xid(xid: int, entry: dict[str, Any] | None, ago_s: int) -> dict[str, Any]:
        event = {"kind": "xid", "xid": xid, "occurred_at": iso(now - timedelta(seconds=ago_s))}
        event["message"] = f"NVRM: Xid {xid}"
        return {**event, "gpu_uuid": entry["uuid"]} if entry else event

    token = create_token(db_url, "node-a")
    events = [xid(13, gpus[2], 1200), xid(79, gpus[1], 300), xid(48, gpus[3], 240)]
    send(url, token, batch(gpus=gpus, events=[*events, xid(31, None, 200)]))
    (incident,) = httpx.get(f"{url}/api/v1/incidents", timeout=30).json()
    common = {"user": "alice", "partition": "gpu", "state": "RUNNING", "ended_at": None}
    started = now - timedelta(minutes=10)
    capture(
        db_url,
        incident["id"],
        job_id="4242",
        name="llm pretrain",
        started_at=started,
        gpu_indexes=[1, 2],
        **common,
    )
    capture(
        db_url,
        incident["id"],
        job_id="4243_7",
        name="sweep",
        started_at=started,
        gpu_indexes=None,
        **common,
    )
    return {"incident": incident["id"], "url": url}


def job(url: str, job_id: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/api/v1/jobs/slurm/{job_id}", timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_job_slurm_no_longer_knows_is_shown_as_captured_with_its_gpus_events(
    captured: dict[str, Any],
) -> None:
    answer = job(captured["url"], "4242")
    assert (answer["source"], answer["slurm_error"], answer["state"]) == (
        "captured",
        None,
        "RUNNING",
    )
    assert (answer["name"], answer["user"], answer["ended_at"]) == ("llm pretrain", "alice", None)
    (node,) = answer["nodes"]
    assert (node["slurm_name"], node["hostname"], node["gpu_indexes"]) == (
        "node-a",
        "node-a",
        [1, 2],
    )
    events = {g["index"]: [(e["kind"], e["xid"]) for e in g["events"]] for g in node["gpus"]}
    assert events == {1: [("xid", 79)], 2: []}  # the Xid 13 came before the job
    assert [e["xid"] for e in node["node_events"]] == [31]
    (incident,) = node["incidents"]
    assert (incident["id"], incident["hit"], incident["xids"]) == (
        captured["incident"],
        True,
        [31, 48, 79],
    )

    page = httpx.get(f"{captured['url']}/jobs/slurm/4242", timeout=30)
    assert page.status_code == 200
    html = page.text
    assert 'id="job-source"' in html and "Slurm could not be asked" not in html
    assert (
        f'<a href="/incidents/{captured["incident"]}">Incident #{captured["incident"]}</a>' in html
    )
    assert '<a href="/nodes/node-a">node-a</a>' in html
    assert 'data-gpu="1"' in html and 'data-gpu="2"' in html and 'data-gpu="3"' not in html
    assert "NVRM: Xid 79" in html and "NVRM: Xid 48" not in html

    incident_page = httpx.get(f"{captured['url']}/incidents/{captured['incident']}", timeout=30)
    assert '<a href="/jobs/slurm/4242">4242</a>' in incident_page.text
    assert '<a href="/jobs/slurm/4243_7">4243_7</a>' in incident_page.text


def test_a_job_holding_the_whole_node_lists_all_its_gpus(captured: dict[str, Any]) -> None:
    (node,) = job(captured["url"], "4243_7")["nodes"]
    assert node["gpu_indexes"] is None
    events = {g["index"]: [e["xid"] for e in g["events"]] for g in node["gpus"]}
    assert events == {0: [], 1: [79], 2: [], 3: [48]}


def test_an_unknown_job_is_404_naming_it(captured: dict[str, Any]) -> None:
    api = httpx.get(f"{captured['url']}/api/v1/jobs/slurm/999", timeout=30)
    page = httpx.get(f"{captured['url']}/jobs/slurm/999", timeout=30)
    assert api.status_code == 404 and "no Slurm job 999" in api.json()["detail"]
    assert page.status_code == 404 and "no Slurm job 999" in page.text


@pytest.mark.parametrize("bad", ["abc", "12_", "1+2+3", "12_x", "-1", "4242 ", "1" * 21])
def test_a_job_id_that_is_no_slurm_job_id_is_422_naming_job_id(
    captured: dict[str, Any], bad: str
) -> None:
    api = httpx.get(f"{captured['url']}/api/v1/jobs/slurm/{bad}", timeout=30)
    page = httpx.get(f"{captured['url']}/jobs/slurm/{bad}", timeout=30)
    assert api.status_code == 422
    assert [e["loc"] for e in api.json()["detail"]] == [["path", "job_id"]]
    assert page.status_code == 422 and "job_id: " in page.text


def test_when_scontrol_fails_the_page_says_so_and_shows_the_capture(
    captured: dict[str, Any], db_url: str, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-scontrol")
    live = LiveServer(make_settings(db_url, tmp_path, slurm_scontrol=missing))
    live.start()
    try:
        answer = job(live.url, "4242")
        unknown = httpx.get(f"{live.url}/api/v1/jobs/slurm/999", timeout=30)
        page = httpx.get(f"{live.url}/jobs/slurm/4242", timeout=30)
    finally:
        live.stop()
    assert (answer["source"], answer["slurm_error"]) == ("captured", f"{missing}: not found")
    assert [g["index"] for g in answer["nodes"][0]["gpus"]] == [1, 2]
    assert unknown.status_code == 503
    assert unknown.json()["detail"].startswith("Slurm job 999: Slurm could not be asked")
    assert 'id="job-slurm-error"' in page.text and f"{missing}: not found" in page.text
