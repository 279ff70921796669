"""Quarantine and return to service against a real Slurm (Debian's slurmctld, slurmd and
munge, started by :mod:`tests.slurm_cluster`), through a real server with its jobs on Postgres
and SQLite: the quarantine drains the node in Slurm with the reason, a running job keeps
running and a new one waits, the resume returns the node and the waiting job starts; the action
log holds the exact commands and their outcomes. A node in Slurm and in Kubernetes (a local
fake of the API, :mod:`tests.kube_api`) has the jobs of both captured for its incident."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.remediation.service import Backends
from app.remediation.slurm import SlurmNode, parse_show_node
from app.workloads import capture
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token, xid_batch
from tests.kube_api import FakeApi, write_kubeconfig
from tests.live_server import LiveServer
from tests.slurm_cluster import SlurmCluster, cluster_for_test, wait_until


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """A one-node Slurm cluster; the server's commands reach it through SLURM_CONF."""
    yield from cluster_for_test(tmp_path, monkeypatch)


def _node(cluster: SlurmCluster) -> SlurmNode:
    return parse_show_node(cluster.run("scontrol", "show", "node", "-o", cluster.node))


def _job_state(cluster: SlurmCluster, job_id: str) -> str:
    return cluster.run("squeue", "-h", "-j", job_id, "-o", "%T").strip()


def test_quarantine_drains_the_slurm_node_and_resume_returns_it(
    cluster: SlurmCluster, db_url: str, tmp_path: Path
) -> None:
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    live = LiveServer(
        make_settings(db_url, tmp_path, slurm_scontrol=scontrol, action_worker_interval_s=30),
        run_jobs=True,
    )
    live.start()
    try:
        token = create_token(db_url, cluster.node)
        assert post_batch(live.url, token, batch(cluster.node)).status_code == 200
        running = cluster.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300")
        running = running.strip()
        wait_until(lambda: _job_state(cluster, running) == "RUNNING", "the first job to run")

        lifecycle = f"{live.url}/api/v1/nodes/{cluster.node}/lifecycle"
        made = httpx.post(
            lifecycle,
            json={"to_state": "quarantined", "reason": "Xid 79 on GPU 3", "actor": "oncall"},
            timeout=10,
        )
        assert made.status_code == 200, made.text
        # Run by the worker the commit woke (its timer is 30 s away).
        done = wait_until(
            lambda: [
                a
                for a in httpx.get(lifecycle).json()["actions"]
                if a["status"] not in ("pending", "running")
            ],
            "the drain to run",
            timeout_s=20,
        )
        assert done[0]["status"] == "succeeded", done
        assert done[0]["command"] == [
            scontrol,
            "update",
            f"NodeName={cluster.node}",
            "State=DRAIN",
            "Reason=fleetwatch: Xid 79 on GPU 3",
        ]
        node = _node(cluster)
        assert node.drained, node
        assert node.reason == "fleetwatch: Xid 79 on GPU 3"
        assert _job_state(cluster, running) == "RUNNING"  # a drain lets running jobs finish
        waiting = cluster.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 1")
        waiting = waiting.strip()
        time.sleep(2)
        assert _job_state(cluster, waiting) == "PENDING"

        cluster.run("scancel", running)
        back = httpx.post(
            lifecycle, json={"to_state": "in_service", "reason": "GPU reseated"}, timeout=10
        )
        assert back.status_code == 200, back.text
        wait_until(lambda: not _node(cluster).drained, "the node to leave DRAIN", timeout_s=20)
        wait_until(
            lambda: _job_state(cluster, waiting) in ("RUNNING", "COMPLETING", ""),
            "the waiting job to start",
        )
        body = httpx.get(lifecycle).json()
        assert body["state"] == "in_service"
        log = [(a["verb"], a["status"], a["returncode"]) for a in reversed(body["actions"])]
        assert log == [("drain", "succeeded", 0), ("resume", "succeeded", 0)]
    finally:
        live.stop()


def test_scontrol_show_node_is_read_as_slurm_prints_it(cluster: SlurmCluster) -> None:
    idle = _node(cluster)
    assert (idle.name, idle.state, idle.reason, idle.drained) == (cluster.node, "IDLE", None, False)
    cluster.run(
        "scontrol",
        "update",
        f"NodeName={cluster.node}",
        "State=DRAIN",
        "Reason=fleetwatch: NVLink 3 down; see runbook=gpu-nvlink-down",
    )
    drained = _node(cluster)
    assert drained.drained and "DRAIN" in drained.state
    assert drained.reason == "fleetwatch: NVLink 3 down; see runbook=gpu-nvlink-down"


def test_a_fault_under_a_running_job_is_one_click_from_a_drain(
    cluster: SlurmCluster, db_url: str, tmp_path: Path
) -> None:
    """Issue 17's loop: an Xid 79 on a node running a real Slurm job opens an incident that
    lists the job as hit and recommends quarantine; one click drains the node with the
    incident's reason; the resume returns it."""
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    live = LiveServer(
        make_settings(db_url, tmp_path, slurm_scontrol=scontrol, action_worker_interval_s=1),
        run_jobs=True,
    )
    live.start()
    try:
        token = create_token(db_url, cluster.node)
        assert post_batch(live.url, token, batch(cluster.node)).status_code == 200
        job = cluster.run(
            "sbatch", "--parsable", "-J", "llm-pretrain", "-o", "/dev/null", "--wrap", "sleep 300"
        ).strip()
        wait_until(lambda: _job_state(cluster, job) == "RUNNING", "the job to run")

        fault = xid_batch(cluster.node, datetime.now(UTC), xid=79)
        assert post_batch(live.url, token, fault).status_code == 200
        (incident,) = httpx.get(f"{live.url}/api/v1/incidents").json()
        detail_url = f"{live.url}/api/v1/incidents/{incident['id']}"
        detail = wait_until(
            lambda: (d := httpx.get(detail_url).json())["jobs_captured_at"] and d,
            "the incident's jobs to be captured",
        )
        assert detail["jobs_error"] is None
        (hit,) = detail["jobs"]
        assert (hit["job_id"], hit["name"], hit["user"], hit["state"], hit["hit"]) == (
            job,
            "llm-pretrain",
            "root",
            "RUNNING",
            True,
        )
        assert hit["gpu_indexes"] is None  # this cluster allocates no GPU by index

        page = httpx.get(f"{live.url}/incidents/{incident['id']}").text
        assert f'data-job="{job}"' in page
        form = re.search(r'<form[^>]*class="lifecycle-accept".*?</form>', page, re.S)
        assert form is not None, "the incident recommends quarantine"
        fields = {
            k: unescape(v)
            for k, v in re.findall(r'name="([a-z_]+)"[^>]*value="([^"]*)"', form.group(0))
        }
        clicked = httpx.post(f"{live.url}/nodes/{cluster.node}/lifecycle", data=fields)
        assert clicked.status_code == 303
        reason = fields["reason"]
        assert reason.startswith(f"incident #{incident['id']}: Xid 79 on GPU 0")
        node = wait_until(lambda: (n := _node(cluster)).drained and n, "the drain")
        assert node.reason == f"fleetwatch: {reason}"[:200]

        lifecycle = f"{live.url}/api/v1/nodes/{cluster.node}/lifecycle"
        assert httpx.post(
            lifecycle, json={"to_state": "in_service", "reason": "GPU 0 reset, DCGM diag passed"}
        ).is_success
        wait_until(lambda: not _node(cluster).drained, "the resume")
        body = httpx.get(lifecycle).json()
        assert [(t["from_state"], t["to_state"], t["cause"]) for t in body["transitions"]] == [
            ("quarantined", "in_service", "person"),
            ("in_service", "quarantined", "incident"),
        ]
        assert [(a["verb"], a["status"]) for a in body["actions"]] == [
            ("resume", "succeeded"),
            ("drain", "succeeded"),
        ]
    finally:
        live.stop()
        cluster.run("scancel", "--user", "root")


def test_a_node_in_slurm_and_kubernetes_has_the_jobs_of_both_captured(
    cluster: SlurmCluster, db_url: str, tmp_path: Path
) -> None:
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    api = FakeApi([])
    config = write_kubeconfig(tmp_path / "kubeconfig", api.url)
    live = LiveServer(
        make_settings(db_url, tmp_path, slurm_scontrol=scontrol, kubeconfig=str(config))
    )
    live.start()
    try:
        token = create_token(db_url, cluster.node)
        assert post_batch(live.url, token, batch(cluster.node)).status_code == 200
        job = cluster.run(
            "sbatch", "--parsable", "-J", "llm-pretrain", "-o", "/dev/null", "--wrap", "sleep 300"
        ).strip()
        wait_until(lambda: _job_state(cluster, job) == "RUNNING", "the job to run")
        at = datetime.now(UTC)
        api.pods = [
            {
                "metadata": {"name": "infer-0", "namespace": "serving"},
                "spec": {
                    "nodeName": cluster.node,
                    "serviceAccountName": "vllm",
                    "containers": [
                        {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                    ],
                },
                "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
            }
        ]
        fault = xid_batch(cluster.node, at, xid=79)
        assert post_batch(live.url, token, fault).status_code == 200
        (incident,) = httpx.get(f"{live.url}/api/v1/incidents").json()

        backends = Backends(scontrol=scontrol, kubeconfig=str(config), timeout_s=10)
        with session_factory(db_url) as factory:
            assert capture.capture_due(factory, backends) == 2
            assert capture.capture_due(factory, backends) == 0

        detail = httpx.get(f"{live.url}/api/v1/incidents/{incident['id']}").json()
        assert [(c["system"], c["target"], c["error"]) for c in detail["jobs_captures"]] == [
            ("kubernetes", cluster.node, None),
            ("slurm", cluster.node, None),
        ]
        assert [(j["system"], j["job_id"], j["user"], j["state"]) for j in detail["jobs"]] == [
            ("kubernetes", "serving/infer-0", "vllm", "Running"),
            ("slurm", job, "root", "RUNNING"),
        ]
        page = httpx.get(f"{live.url}/incidents/{incident['id']}").text
        assert 'data-job="serving/infer-0" data-system="kubernetes"' in page
        assert f'data-job="{job}" data-system="slurm"' in page
    finally:
        live.stop()
        api.close()
        cluster.run("scancel", "--user", "root")


def test_someone_elses_drain_is_left_alone_and_a_resume_slurm_did_already_is_skipped(
    cluster: SlurmCluster, db_url: str, tmp_path: Path
) -> None:
    from app.remediation.worker import ActionWorker
    from tests.dbs import session_factory

    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    live = LiveServer(make_settings(db_url, tmp_path, slurm_scontrol=scontrol))
    live.start()
    lifecycle = f"{live.url}/api/v1/nodes/{cluster.node}/lifecycle"

    def move(to_state: str, reason: str) -> dict[str, Any]:
        response = httpx.post(lifecycle, json={"to_state": to_state, "reason": reason})
        assert response.status_code == 200, response.text
        with session_factory(db_url) as factory:
            ActionWorker(factory).run_once()
        action: dict[str, Any] = httpx.get(lifecycle).json()["actions"][0]
        return action

    try:
        token = create_token(db_url, cluster.node)
        assert post_batch(live.url, token, batch(cluster.node)).status_code == 200
        # An admin's drain: Fleetwatch neither overwrites its reason nor resumes it.
        cluster.run(
            "scontrol",
            "update",
            f"NodeName={cluster.node}",
            "State=DRAIN",
            "Reason=admin: bad DIMM, do not resume",
        )
        drain = move("quarantined", "Xid 48")
        assert drain["status"] == "skipped", drain
        assert drain["output"] == (
            "already drained by someone else (Reason=admin: bad DIMM, do not resume): left as it is"
        )
        resume = move("in_service", "GPU reset")
        assert resume["status"] == "skipped"
        assert resume["output"].startswith("drained by someone else (Reason=admin: bad DIMM")
        node = _node(cluster)
        assert node.drained and node.reason == "admin: bad DIMM, do not resume"

        # Resumed by hand in Slurm meanwhile: Fleetwatch's resume has nothing to do, and the
        # next quarantine drains at once (nothing jammed behind a refused resume).
        cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
        assert move("quarantined", 'reason with "quotes"')["status"] == "succeeded"
        assert _node(cluster).reason == "fleetwatch: reason with 'quotes'"
        cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
        skipped = move("in_service", "back")
        assert skipped["status"] == "skipped"
        assert skipped["output"].startswith("not drained in Slurm (State=IDLE")
        assert move("quarantined", "Xid 79 again")["status"] == "succeeded"
        assert _node(cluster).drained
    finally:
        live.stop()
