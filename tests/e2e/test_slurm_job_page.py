"""A job's page against a real Slurm (Debian's slurmctld, slurmd and munge, started by
:mod:`tests.slurm_cluster` with 4 GPUs as GRES), through a real server on Postgres and SQLite:
a job given 2 GPUs, an Xid on one of them and one on a GPU it does not hold; the job's page
lists its GPUs with the Xid during it and the incident; the incident's capture links the
job; once it ends the run stops at its end; with Slurm's controller unreachable the page says
so and shows what the capture kept."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.factories import batch, create_token, gpu, iso
from tests.live_server import LiveServer, free_port
from tests.slurm_cluster import SlurmCluster, cluster_for_test, wait_until


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """A one-node Slurm cluster with 4 GPUs; the server's commands reach it through
    SLURM_CONF."""
    yield from cluster_for_test(tmp_path, monkeypatch, gpus=4)


def _unreachable(cluster: SlurmCluster, root: Path) -> Path:
    """A copy of the cluster's slurm.conf whose controller port nothing listens on (and that
    gives up at once rather than retrying for 20 s)."""
    lines = [
        f"SlurmctldPort={free_port()}" if line.startswith("SlurmctldPort=") else line
        for line in cluster.conf.read_text().splitlines()
    ]
    conf = root / "unreachable.conf"
    conf.write_text("\n".join([*lines, "MessageTimeout=1", "TCPTimeout=1", ""]))
    return conf


def test_a_jobs_page_lists_its_gpus_and_the_xid_during_it(
    cluster: SlurmCluster, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    live = LiveServer(
        make_settings(db_url, tmp_path, slurm_scontrol=scontrol, action_worker_interval_s=1),
        run_jobs=True,
    )
    live.start()
    try:
        token = create_token(db_url, cluster.node)
        gpus = [gpu(i, hostname=cluster.node) for i in range(4)]
        assert post_batch(live.url, token, batch(cluster.node, gpus=gpus)).status_code == 200
        job = cluster.run(
            "sbatch",
            "--parsable",
            "--gres=gpu:2",
            "-J",
            "llm pretrain",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ).strip()
        wait_until(
            lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING",
            "the job to run",
        )
        now = iso(datetime.now(UTC))
        xids = [
            {"kind": "xid", "occurred_at": now, "gpu_uuid": gpus[i]["uuid"], "xid": xid}
            | {"message": f"NVRM: Xid (PCI:{gpus[i]['pci_bus_id']}): {xid}"}
            for i, xid in ((0, 79), (3, 48))
        ]
        fault = batch(cluster.node, gpus=gpus, samples_per_gpu=1, events=xids)
        assert post_batch(live.url, token, fault).status_code == 200
        (incident,) = httpx.get(f"{live.url}/api/v1/incidents").json()

        api = f"{live.url}/api/v1/jobs/slurm/{job}"
        answer = httpx.get(api, timeout=30).json()
        assert (answer["source"], answer["state"], answer["name"], answer["user"]) == (
            "slurm",
            "RUNNING",
            "llm pretrain",
            "root",
        )
        assert answer["ended_at"] is None and answer["slurm_error"] is None
        (node,) = answer["nodes"]
        assert (node["slurm_name"], node["hostname"], node["gpu_indexes"]) == (
            cluster.node,
            cluster.node,
            [0, 1],
        )
        events = {g["index"]: [e["xid"] for e in g["events"]] for g in node["gpus"]}
        assert events == {0: [79], 1: []}  # GPU 3's Xid 48 is not the job's
        assert [(i["id"], i["hit"]) for i in node["incidents"]] == [(incident["id"], True)]

        page = httpx.get(f"{live.url}/jobs/slurm/{job}", timeout=30).text
        assert 'data-gpu="0"' in page and 'data-gpu="1"' in page and 'data-gpu="3"' not in page
        assert "NVRM: Xid (PCI:00000000:18:00.0): 79" in page and ": 48</code>" not in page
        assert f'<a href="/incidents/{incident["id"]}">' in page

        # The capture (the server's job, every second) links the incident to the job's page.
        incident_url = f"{live.url}/incidents/{incident['id']}"
        wait_until(lambda: f'href="/jobs/slurm/{job}"' in httpx.get(incident_url).text, "capture")

        cluster.run("scancel", job)
        ended = wait_until(
            lambda: (a := httpx.get(api, timeout=30).json())["ended_at"] and a, "the end"
        )
        assert ended["state"] in ("CANCELLED", "COMPLETING") and ended["until"] == ended["ended_at"]

        # Slurm's controller out of reach: the page says so and shows the capture.
        monkeypatch.setenv("SLURM_CONF", str(_unreachable(cluster, tmp_path)))
        fallback = httpx.get(api, timeout=30).json()
        assert fallback["source"] == "captured"
        assert "Unable to contact slurm controller" in fallback["slurm_error"]
        (node,) = fallback["nodes"]
        assert {g["index"]: [e["xid"] for e in g["events"]] for g in node["gpus"]} == events
        page = httpx.get(f"{live.url}/jobs/slurm/{job}", timeout=30).text
        assert 'id="job-slurm-error"' in page and "Unable to contact slurm controller" in page
    finally:
        live.stop()
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        cluster.run("scancel", "--user", "root")
