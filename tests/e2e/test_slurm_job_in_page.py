"""The page of a fault names the Slurm job it hit: a real one-node Slurm (Debian's slurmctld,
slurmd and munge, :mod:`tests.slurm_cluster`) runs a job; an Xid 79 is posted for its node to
a server that evaluates the default rules every second and sends to a local webhook. The one
firing notice (``gpu-critical-xid``) carries the job in its ``jobs_hit`` annotation: the page waited
for the capture of the node's jobs instead of going out without them. Postgres and SQLite."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings
from app.demo import add_webhook, apply_default_rules
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.e2e.test_notify_demo import serve
from tests.factories import batch, create_token, xid_batch
from tests.notify_helpers import receiver, wipe_notify
from tests.slurm_cluster import SlurmCluster, cluster_for_test


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    yield from cluster_for_test(tmp_path, monkeypatch)


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Iterator[Settings]:
    scontrol = shutil.which("scontrol")
    assert scontrol is not None
    yield make_settings(
        db_url,
        tmp_path,
        alert_eval_interval_s=1,
        notify_allow_hosts=["127.0.0.1"],
        slurm_scontrol=scontrol,
        # The capture runs on this timer, first 20 s after the start: long after the page
        # would have gone (group wait 5 s), so the page must wait for it (up to 2 × 20 + 10 s).
        action_worker_interval_s=20,
    )
    wipe_notify(db_url)
    wipe(db_url)


def _firing(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for body in bodies for a in body["alerts"] if a["status"] == "firing"]


def test_the_page_names_the_job_the_fault_hit(
    cluster: SlurmCluster, settings: Settings, db_url: str
) -> None:
    apply_default_rules(settings)
    with receiver() as hook:
        add_webhook(settings, url=hook.url + "/hook", secret=None)
        server, thread, url = serve(settings)
        try:
            token = create_token(db_url, cluster.node)
            assert post_batch(url, token, batch(cluster.node)).status_code == 200
            job = cluster.run(
                "sbatch",
                "--parsable",
                "-J",
                "llm-pretrain",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 300",
            ).strip()
            deadline = time.monotonic() + 30
            while cluster.run("squeue", "-h", "-j", job, "-o", "%T").strip() != "RUNNING":
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.2)

            fault = xid_batch(cluster.node, datetime.now(UTC), xid=79)
            assert post_batch(url, token, fault).status_code == 200
            deadline = time.monotonic() + 90
            while not _firing(hook.bodies()) and time.monotonic() < deadline:
                time.sleep(0.3)
            time.sleep(3.0)  # no second page on the next ticks
            firing = _firing(hook.bodies())
        finally:
            cluster.run("scancel", job) if "job" in locals() else None
            server.should_exit = True
            thread.join(timeout=15)
    assert [a["labels"]["alertname"] for a in firing] == ["gpu-critical-xid"], firing
    assert firing[0]["annotations"]["jobs_hit"] == (f"slurm job {job} llm-pretrain (root, RUNNING)")
