"""Fault: the server killed with ``kill -9`` while agents push batches to it.

Simulated agents (the real agent code, :class:`agents.simfleet.SimFleet`) push to a real
``fleetwatch serve`` process on a fresh Postgres database. The server is killed with SIGKILL
``--kills`` times, mid-ingest (the agents post a batch every 0.5 s each, so requests are in
flight), left down ``--down`` seconds and started again. The agents keep their batches in their
spools and resend; a batch the dead server had committed but not answered is resent under its
``batch_id`` and stored nothing twice (``ingest_batch`` claim, ``gpu_sample`` primary key).

Prints: samples the agents produced, acknowledged and stored, distinct keys (duplicates would
make rows > keys), batches dropped, and per kill the server's start time and the time until the
agents' backlog was drained.

    python bench/faults/server_kill9.py [--nodes 20] [--kills 3] [--up 4] [--down 3]
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.server_process import (  # noqa: E402
    ServerProcess,
    fresh_database,
    stored_samples,
    summary,
    wait_for,
)

AGENT_OPTIONS = {"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0}


@dataclass
class KillResult:
    """What one run measured: the agents' counters summed, the rows stored, per kill the
    server's start time and the seconds from the restart until the backlog was drained
    (None: not drained within the wait)."""

    totals: dict[str, int]
    rows: int
    distinct: int
    start_s: list[float] = field(default_factory=list)
    recover_s: list[float | None] = field(default_factory=list)
    failures_while_down: int = 0

    @property
    def lost(self) -> int:
        """Samples produced but not stored."""
        return self.totals["samples_generated"] - self.distinct


def drained(fleet: SimFleet) -> bool:
    """Every agent's spool holds at most the batch it is cutting now."""
    return all(len(agent.spool) <= 1 for agent in fleet.agents.values())


def run(
    db_url: str,
    work: Path,
    *,
    nodes: int = 20,
    kills: int = 3,
    up_s: float = 4.0,
    down_s: float = 3.0,
    port: int | None = None,
    seed: int = 1,
) -> KillResult:
    """Run the fault on ``db_url`` (migrated, empty) with spools and the log under ``work``."""
    rng = random.Random(seed)
    fleet_nodes = [
        FleetNode(f"kill9-{i:03d}", create_token(db_url, f"kill9-{i:03d}"), 8, {"cluster": "k9"})
        for i in range(nodes)
    ]
    server = ServerProcess(db_url, port or free_port(), work / "server.log")
    server.start()
    fleet = SimFleet(
        fleet_nodes,
        server_url=server.url,
        spool_root=work / "spool",
        interval_s=0.2,
        batch_interval_s=0.5,
        agent_options=AGENT_OPTIONS,
        seed=seed,
    )
    result = KillResult(totals={}, rows=0, distinct=0)
    fleet.start()
    try:
        for _ in range(kills):
            time.sleep(up_s * rng.uniform(0.75, 1.25))
            server.kill()
            before = fleet.totals()["push_failures"]
            time.sleep(down_s)
            result.failures_while_down += fleet.totals()["push_failures"] - before
            restarted = time.monotonic()
            result.start_s.append(server.start())
            waited = wait_for(lambda: drained(fleet), timeout_s=120.0)
            result.recover_s.append(None if waited is None else time.monotonic() - restarted)
        time.sleep(up_s)
    finally:
        fleet.stop(timeout_s=30)
    try:
        for agent in fleet.agents.values():
            agent.push_pending(ignore_backoff=True)  # what the last push left behind
        result.totals = fleet.totals()
        result.rows, result.distinct = stored_samples(db_url)
    finally:
        server.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=20, help="simulated 8-GPU agents")
    parser.add_argument("--kills", type=int, default=3, help="kill -9 this many times")
    parser.add_argument("--up", type=float, default=4.0, help="seconds up between kills")
    parser.add_argument("--down", type=float, default=3.0, help="seconds down after a kill")
    parser.add_argument("--port", type=int, default=None, help="server port (default: free)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the agents' retry warnings are expected here
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-kill9-") as tmp:
        r = run(
            url,
            Path(tmp),
            nodes=args.nodes,
            kills=args.kills,
            up_s=args.up,
            down_s=args.down,
            port=args.port,
        )
    t = r.totals
    print(
        summary(
            "server killed with -9 during ingest",
            [
                ("agents x GPUs", f"{args.nodes} x 8"),
                ("kills", args.kills),
                ("pushes failed while down", r.failures_while_down),
                ("samples produced", t["samples_generated"]),
                ("samples acknowledged", t["samples_acked"]),
                ("rows stored / distinct keys", f"{r.rows} / {r.distinct}"),
                ("duplicates (rows - keys)", r.rows - r.distinct),
                ("batches dropped by agents", t["batches_dropped"]),
                ("LOST (produced - stored)", r.lost),
                ("server start after kill, s", ", ".join(f"{s:.1f}" for s in r.start_s)),
                (
                    "backlog drained after restart, s",
                    ", ".join("never" if s is None else f"{s:.1f}" for s in r.recover_s),
                ),
            ],
        )
    )
    return 0 if r.lost == 0 and r.rows == r.distinct else 1


if __name__ == "__main__":
    sys.exit(main())
