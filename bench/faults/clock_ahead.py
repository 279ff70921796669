"""Fault: one agent's clock 15 minutes ahead of the server's.

A real server (jobs on, the default rule pack, a local webhook receiver) gets batches from
simulated agents with good clocks (:class:`agents.simfleet.SimFleet`) and from one real agent
process (``python -m agents --collector simulated``) whose clock reads ``--skew`` seconds ahead
(bench/faults/skewed_agent.py). The server measures the skew (``sent_at - received_at``) and
refuses readings dated beyond ``FLEETWATCH_FUTURE_TOLERANCE_S`` (300 s) ahead as
``sampled_at_in_future``: stored at those times they would sit beside the real readings of
the future; the agent does not count them as sent, does not retry them and says so on stderr.
The node must not look healthy meanwhile: its health says its clock is off and its readings are
refused, and that pages. Then the clock is fixed (the agent restarted without the skew) and the
script times how long until the node's samples are stored again.

Prints: the measured skew, the skewed node's health and reasons, its pages, samples stored for
it and for the others (the others must lose nothing), the agent's log line, and the recovery.

    python bench/faults/clock_ahead.py [--skew 900] [--seconds 20]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from app.db import make_engine  # noqa: E402
from app.fleet.models import Gpu, Node  # noqa: E402
from app.series.tables import gpu_sample  # noqa: E402
from bench.faults.paging import SERVER_ENV, pages, prepare_alerting  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.notify_helpers import receiver  # noqa: E402
from tests.server_process import ServerProcess, fresh_database, summary, wait_for  # noqa: E402

SKEWED = "skewed-001"
AGENT_OPTIONS = {"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0}


@dataclass
class ClockResult:
    """What one run measured."""

    skew_s: float | None = None
    health: dict[str, Any] = field(default_factory=dict)
    node_pages: list[str] = field(default_factory=list)
    skewed_rows: int = 0
    others_generated: int = 0
    others_stored: int = 0
    agent_said: str = ""
    recovered_s: float | None = None
    healthy_after: str = ""


def stored_for(db_url: str, hostname: str | None, *, others: bool = False) -> int:
    """GPU sample rows of ``hostname``'s GPUs (``others``: of every other node's)."""
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            hit = Node.hostname != hostname if others else Node.hostname == hostname
            query = (
                select(func.count())
                .select_from(gpu_sample)
                .join(Gpu, Gpu.id == gpu_sample.c.gpu_id)
                .join(Node, Node.id == Gpu.node_id)
                .where(hit)
            )
            return int(conn.scalar(query) or 0)
    finally:
        engine.dispose()


def agent_command(server_url: str, token: str, spool: Path, skew_s: float) -> list[str]:
    """The skewed agent's command line (``skew_s`` 0: a good clock)."""
    return [
        sys.executable,
        str(ROOT / "bench" / "faults" / "skewed_agent.py"),
        "--skew-s",
        str(skew_s),
        "--",
        "--server",
        server_url,
        "--token",
        token,
        "--hostname",
        SKEWED,
        "--collector",
        "simulated",
        "--sim-gpus",
        "4",
        "--interval",
        "1",
        "--batch-interval",
        "2",
        "--spool-dir",
        str(spool),
    ]


def run(db_url: str, work: Path, *, skew_s: float = 900.0, seconds: float = 20.0) -> ClockResult:
    """Run the fault on ``db_url`` (migrated, empty); logs and spools under ``work``."""
    result = ClockResult()
    with receiver() as hook:
        prepare_alerting(db_url, hook.url + "/hook")
        server = ServerProcess(db_url, free_port(), work / "server.log", env=SERVER_ENV)
        server.start()
        token = create_token(db_url, SKEWED)
        others = [
            FleetNode(f"good-{i:03d}", create_token(db_url, f"good-{i:03d}"), 8, {})
            for i in range(3)
        ]
        fleet = SimFleet(
            others,
            server_url=server.url,
            spool_root=work / "spool",
            interval_s=1.0,
            batch_interval_s=2.0,
            agent_options=AGENT_OPTIONS,
        )
        err = work / "agent.err"
        agent: subprocess.Popen[bytes] | None = None
        fleet.start()
        try:
            with open(err, "wb") as log:
                agent = subprocess.Popen(
                    agent_command(server.url, token, work / "agent-spool", skew_s),
                    cwd=ROOT,
                    stdout=log,
                    stderr=log,
                )
            time.sleep(seconds)
            node = server.api.get(f"{server.url}/api/v1/nodes/{SKEWED}", timeout=10).json()
            result.skew_s = node.get("clock_skew_s")
            result.health = server.api.get(
                f"{server.url}/api/v1/nodes/{SKEWED}/health", timeout=10
            ).json()
            result.node_pages = sorted(
                name for (host, name) in pages(hook.bodies()) if host == SKEWED
            )
            result.skewed_rows = stored_for(db_url, SKEWED)
            agent.terminate()
            agent.wait(timeout=30)
            result.agent_said = next(
                (line for line in err.read_text().splitlines() if "clock" in line), ""
            )
            fixed = time.monotonic()
            with open(err, "ab") as log:  # the clock fixed (NTP): the agent started again
                agent = subprocess.Popen(
                    agent_command(server.url, token, work / "agent-spool", 0.0),
                    cwd=ROOT,
                    stdout=log,
                    stderr=log,
                )
            if wait_for(lambda: stored_for(db_url, SKEWED) > 0, 60) is not None:
                result.recovered_s = time.monotonic() - fixed
            time.sleep(3.0)
            after = server.api.get(f"{server.url}/api/v1/nodes/{SKEWED}/health", timeout=10).json()
            result.healthy_after = after["state"]
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=30)
            fleet.stop(timeout_s=30)
        try:
            for a in fleet.agents.values():
                a.push_pending(ignore_backoff=True)
            result.others_generated = fleet.totals()["samples_generated"]
            result.others_stored = stored_for(db_url, SKEWED, others=True)
        finally:
            server.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skew", type=float, default=900.0, help="seconds the clock is ahead")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds run with the skew")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-clock-") as tmp:
        r = run(url, Path(tmp), skew_s=args.skew, seconds=args.seconds)
    reasons = "; ".join(f"{x['code']}: {x['text']}" for x in r.health.get("reasons", []))
    print(
        summary(
            f"one agent's clock {args.skew:g} s ahead",
            [
                ("skew measured by the server, s", r.skew_s),
                ("skewed node's health", r.health.get("state")),
                ("its reasons", reasons or "(none)"),
                ("its pages", ", ".join(r.node_pages) or "(none)"),
                ("its samples stored while skewed", r.skewed_rows),
                ("the agent said", r.agent_said[:300]),
                ("other nodes: produced / stored", f"{r.others_generated} / {r.others_stored}"),
                ("LOST on other nodes", r.others_generated - r.others_stored),
                ("clock fixed -> samples stored again, s", _s(r.recovered_s)),
                ("its health after the fix", r.healthy_after),
            ],
        )
    )
    return 0 if r.others_generated == r.others_stored and r.recovered_s is not None else 1


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
