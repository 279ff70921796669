"""The action worker runs nodes side by side: while one node's drain hangs (its "scontrol"
waits for a file the test creates), another node's drain is run and recorded; each node's
own actions still run in order. Postgres and SQLite."""

from __future__ import annotations

import stat
import sys
import threading
import time
from pathlib import Path

import httpx

from app.remediation.worker import ActionWorker
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token
from tests.live_server import LiveServer


def _scontrol(tmp_path: Path, release: Path) -> Path:
    """An "scontrol" that, for node ``slow``, waits until ``release`` exists."""
    path = tmp_path / "scontrol"
    path.write_text(
        f"#!{sys.executable}\nimport os, sys, time\n"
        "if 'show' in sys.argv: print('NodeName=x State=IDLE'); sys.exit(0)\n"
        "if 'NodeName=slow' in sys.argv:\n"
        f"    while not os.path.exists({str(release)!r}): time.sleep(0.05)\n"
        "print(' '.join(sys.argv[1:]))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _status(live: LiveServer, host: str) -> list[str]:
    body = httpx.get(f"{live.url}/api/v1/nodes/{host}/lifecycle").json()
    return [a["status"] for a in body["actions"]]


def test_a_hanging_node_does_not_hold_the_others(db_url: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    live = LiveServer(
        make_settings(db_url, tmp_path, slurm_scontrol=str(_scontrol(tmp_path, release)))
    )
    live.start()
    try:
        for host in ("slow", "fast"):
            assert post_batch(live.url, create_token(db_url, host), batch(host)).is_success
        for host in ("slow", "fast"):  # the hanging one first in the log
            moved = httpx.post(
                f"{live.url}/api/v1/nodes/{host}/lifecycle",
                json={"to_state": "quarantined", "reason": "x"},
            )
            assert moved.status_code == 200
        with session_factory(db_url) as factory:
            worker = ActionWorker(factory, timeout_s=60)
            runner = threading.Thread(target=worker.run_once)
            runner.start()
            deadline = time.monotonic() + 30
            while _status(live, "fast") != ["succeeded"]:
                assert time.monotonic() < deadline, "the fast node waited for the slow one"
                time.sleep(0.1)
            assert _status(live, "slow") == ["running"]
            release.touch()
            runner.join(timeout=30)
            assert not runner.is_alive()
        assert _status(live, "slow") == ["succeeded"]
    finally:
        release.touch()
        live.stop()
