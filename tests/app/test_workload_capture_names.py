"""A node whose ``slurm_node`` label is not one Slurm node name (a host list, ``ALL``) never
has ``squeue -w`` asked with it (that would list other nodes' jobs as the incident's): its
capture stores the error instead; a remediation hook among the managed systems is not asked
for jobs. Postgres and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from app.remediation.service import Backends
from app.workloads import capture
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token, xid_batch
from tests.live_server import LiveServer


@pytest.mark.parametrize("label", ["gpu-[01-04]", "ALL", "a,b"])
def test_a_host_list_label_is_never_asked(db_url: str, tmp_path: Path, label: str) -> None:
    squeue = tmp_path / "squeue"  # beside "scontrol": would record being run
    ran = tmp_path / "ran"
    squeue.write_text(f"#!/bin/sh\ntouch {ran}\n")
    squeue.chmod(0o755)
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\nexit 0\n")
    scontrol.chmod(0o755)
    live = LiveServer(make_settings(db_url, tmp_path))
    live.start()
    try:
        token = create_token(db_url, "hl-1")
        assert post_batch(live.url, token, batch("hl-1", labels={"slurm_node": label})).is_success
        fault = xid_batch("hl-1", datetime.now(UTC), xid=79)
        fault["node"]["labels"] = {"slurm_node": label}  # each batch sends the node's labels
        assert post_batch(live.url, token, fault).is_success
        with session_factory(db_url) as factory:
            # A remediation hook configured too: a system with no jobs, never asked for them.
            backends = Backends(scontrol=str(scontrol), hook=("/bin/true",))
            assert capture.capture_due(factory, backends) == 1
        (incident,) = httpx.get(f"{live.url}/api/v1/incidents").json()
        detail = httpx.get(f"{live.url}/api/v1/incidents/{incident['id']}").json()
    finally:
        live.stop()
    assert not ran.exists()
    assert detail["jobs"] == []
    assert "is not one Slurm node name: fix the slurm_node label" in detail["jobs_error"]
