"""Faults during ingest, and what they lose (goal: nothing) — issue 14's reliability campaign.

Simulated agents (agents/simfleet.py: real Agent objects with their on-disk spools and the
simulated GPU collector) push to a real ``fleetwatch serve`` process on a fresh Postgres
database while one fault is made:

* ``server-kill``: the server process is killed with SIGKILL in the middle of the ingest and
  started again ``--down`` seconds later on the same port;
* ``postgres-drop``: every server connection to Postgres is cut (``pg_terminate_backend``)
  repeatedly for ``--down`` seconds, as a Postgres restart or a failover does;

Then the agents stop, send what their spools still hold, and the script prints, per fault:
samples the agents generated, acknowledged and the rows stored (distinct keys too: a re-sent
batch must not store twice), events, batches dropped, push failures, what was lost, and the
recovery time (from the fault's end until every spool is empty). Prints the machine.

    python bench/faults.py [--fault server-kill|postgres-drop|all]
                           [--nodes 4] [--seconds 8] [--down 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from app.db import make_engine  # noqa: E402
from app.events.models import NodeEvent  # noqa: E402
from app.series.tables import gpu_sample  # noqa: E402
from tests.dbs import postgres_database  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402

AGENT_OPTIONS = {"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 20.0}


class Server:
    """``fleetwatch serve`` in its own process on a fixed port."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "app", "serve", "--database-url", self.url]
        command += ["--port", str(self.port)]
        env = {**os.environ, "FLEETWATCH_LOG_LEVEL": "error"}
        self.process = subprocess.Popen(command, env=env, cwd=ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not start within 60 s")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def stored(url: str) -> tuple[int, int, int]:
    """(sample rows, distinct (gpu, sampled_at) keys, event rows)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.scalar(select(func.count()).select_from(gpu_sample)) or 0
            keys = select(gpu_sample.c.gpu_id, gpu_sample.c.sampled_at).distinct().subquery()
            distinct = conn.scalar(select(func.count()).select_from(keys)) or 0
            events = conn.scalar(select(func.count()).select_from(NodeEvent)) or 0
        return rows, distinct, events
    finally:
        engine.dispose()


def cut_connections(url: str, seconds: float) -> int:
    """Terminate every other connection to the database, again and again for ``seconds``;
    returns how many were cut."""
    parts = make_url(url)
    dsn = parts.set(drivername="postgresql").render_as_string(hide_password=False)
    cut = 0
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
            cut += sum(1 for (done,) in rows if done)
            time.sleep(0.2)
    return cut


def drained(fleet: SimFleet) -> bool:
    return all(len(agent.spool) == 0 for agent in fleet.agents.values())


def run(fault: str, args: argparse.Namespace) -> dict[str, Any]:
    """One fault from start to the count of what was lost."""
    with postgres_database() as url, tempfile.TemporaryDirectory() as spool:
        server = Server(url)
        server.start()
        nodes = [
            FleetNode(f"fault-{i:03d}", create_token(url, f"fault-{i:03d}"), 8, {"cluster": "f"})
            for i in range(args.nodes)
        ]
        fleet = SimFleet(
            nodes,
            server_url=server.base,
            spool_root=Path(spool),
            interval_s=0.2,
            batch_interval_s=0.5,
            agent_options=AGENT_OPTIONS,
        )
        detail = ""
        fleet.start()
        try:
            time.sleep(args.seconds / 2)
            if fault == "server-kill":
                server.kill()
                time.sleep(args.down)
                server.start()
                detail = f"killed with SIGKILL, down {args.down:g} s"
            else:
                cut = cut_connections(url, args.down)
                detail = f"{cut} connections cut over {args.down:g} s"
            ended = time.monotonic()
            recovered = None
            while time.monotonic() - ended < 60:
                if drained(fleet) and fleet.totals()["batches_sent"] > 0:
                    recovered = time.monotonic() - ended
                    break
                time.sleep(0.1)
            time.sleep(args.seconds / 2)
        finally:
            fleet.stop(timeout_s=30)
        for agent in fleet.agents.values():
            agent.push_pending(ignore_backoff=True)
        totals = fleet.totals()
        rows, distinct, events = stored(url)
        server.stop()
    return {
        "fault": fault,
        "detail": detail,
        "generated": totals["samples_generated"],
        "acked": totals["samples_acked"],
        "rows": rows,
        "distinct": distinct,
        "events": events,
        "events_generated": totals["events_generated"],
        "dropped": totals["batches_dropped"],
        "push_failures": totals["push_failures"],
        "lost": totals["samples_generated"] - distinct,
        "recovery_s": recovered,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault", choices=("server-kill", "postgres-drop", "all"), default="all")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8.0, help="ingest before and after")
    parser.add_argument("--down", type=float, default=4.0, help="how long the fault lasts")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.system()} {platform.release()}; "
        f"{args.nodes} simulated 8-GPU agents, a sample per GPU every 0.2 s, a batch every 0.5 s"
    )
    faults = ["server-kill", "postgres-drop"] if args.fault == "all" else [args.fault]
    for fault in faults:
        r = run(fault, args)
        recovery = "never" if r["recovery_s"] is None else f"{r['recovery_s']:.1f} s"
        print(
            f"{r['fault']:14s} ({r['detail']}): samples generated {r['generated']}, acked "
            f"{r['acked']}, rows {r['rows']} (distinct {r['distinct']}), events "
            f"{r['events']}/{r['events_generated']}, batches dropped {r['dropped']}, push "
            f"failures {r['push_failures']}, LOST {r['lost']}, recovery {recovery}"
        )


if __name__ == "__main__":
    main()
