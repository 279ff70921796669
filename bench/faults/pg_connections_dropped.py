"""Fault: the server's Postgres connections dropped during ingest and during rule evaluation.

A Postgres restart closes every connection of the server at once. The machine's Postgres is
shared, so it is not restarted: instead every session of the server's own database is ended
with ``pg_terminate_backend`` (``--drops`` times, every ``--every`` seconds, at random
moments), which is what a restart looks like to the server's pools, its alert leader lock, its
``LISTEN`` connection and its job locks. Meanwhile simulated agents push every 0.5 s and faults
injected on some nodes are being evaluated and paged (the default rule pack, a local webhook
receiver).

The server must recover without a restart; agents resend what got a 5xx or a dropped
connection, so nothing they sent is lost; each fault pages exactly once. Recovery is timed as a
new fault injected after the last drop: the seconds until it pages.

Prints: drops and the sessions they ended (active ones, and of those running an alert or notify
statement), the pushes that failed, samples produced / acknowledged / stored, pages missing and
doubled, and the recovery times.

    python bench/faults/pg_connections_dropped.py [--nodes 12] [--drops 20] [--every 0.5]
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from bench.faults.paging import (  # noqa: E402
    FAULTS,
    SERVER_ENV,
    page_check,
    pages,
    prepare_alerting,
)
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.notify_helpers import receiver  # noqa: E402
from tests.server_process import (  # noqa: E402
    ServerProcess,
    fresh_database,
    stored_samples,
    summary,
    terminate_backends,
    terminate_while_running,
    wait_for,
)

AGENT_OPTIONS = {"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0}
LATE = "pgdrop-late"
#: Paged before any drop: how long a page takes on this machine without the fault.
BASE = "pgdrop-base"


@dataclass
class DropResult:
    """What one run measured."""

    drops: int = 0
    hunted: int = 0
    sessions: int = 0
    active: int = 0
    alerting: int = 0
    push_failures: int = 0
    generated: int = 0
    acked: int = 0
    dropped_batches: int = 0
    rows: int = 0
    distinct: int = 0
    missing: int = 0
    doubled: int = 0
    unwanted: int = 0
    ingest_back_s: float | None = None
    paged_after_s: float | None = None
    baseline_page_s: float | None = None
    server_pid_same: bool = False
    ready_after: bool = False

    @property
    def lost(self) -> int:
        """Samples produced but not stored."""
        return self.generated - self.distinct


def run(
    db_url: str,
    work: Path,
    *,
    nodes: int = 12,
    drops: int = 20,
    every_s: float = 0.5,
    hunts: int = 6,
    baseline: bool = True,
    quiet_s: float = 8.0,
    port: int | None = None,
    seed: int = 1,
) -> DropResult:
    """Run the fault on ``db_url`` (migrated, empty); spools and the server log under ``work``."""
    rng = random.Random(seed)
    kinds = list(FAULTS)
    faulted = {f"pgdrop-{i:03d}": kinds[i % len(kinds)] for i in range(nodes // 2)}
    hosts = [f"pgdrop-{i:03d}" for i in range(nodes)] + [BASE, LATE]
    result = DropResult()
    with receiver() as hook:
        prepare_alerting(db_url, hook.url + "/hook")
        fleet_nodes = [FleetNode(h, create_token(db_url, h), 8, {"cluster": "pg"}) for h in hosts]
        server = ServerProcess(db_url, port or free_port(), work / "server.log", env=SERVER_ENV)
        server.start()
        pid = server.proc.pid if server.proc else None
        fleet = SimFleet(
            fleet_nodes,
            server_url=server.url,
            spool_root=work / "spool",
            interval_s=0.5,
            batch_interval_s=0.5,
            agent_options=AGENT_OPTIONS,
            seed=seed,
        )
        fleet.start()
        try:
            time.sleep(4.0)  # every node reports, the rules settle
            if baseline:
                fleet.inject(BASE, "xid", 3, 600.0, 48)
                result.baseline_page_s = wait_for(
                    lambda: (BASE, "gpu-critical-xid") in pages(hook.bodies()), 60
                )
            for host, kind in faulted.items():
                fault, index, xid, _ = FAULTS[kind]
                fleet.inject(host, fault, index, 600.0, xid)
            before = fleet.totals()["push_failures"]
            for _ in range(drops):
                ended = terminate_backends(db_url)
                result.drops += 1
                result.sessions += ended.sessions
                result.active += ended.active
                result.alerting += ended.alerting
                time.sleep(every_s * rng.uniform(0.5, 1.5))
            # Then aimed drops: the moment an evaluation or the notification worker runs a
            # statement on its tables.
            for i in range(hunts):
                pattern = "alert_instance" if i % 2 == 0 else "notify_delivery"
                ended = terminate_while_running(db_url, pattern, within_s=10.0)
                if ended is not None:
                    result.hunted += 1
                    result.sessions += ended.sessions
                    result.active += ended.active
                    result.alerting += ended.alerting
            last_drop = time.monotonic()
            sent = fleet.totals()["batches_sent"]
            result.push_failures = fleet.totals()["push_failures"] - before
            fleet.inject(LATE, "xid", 3, 600.0, 48)
            result.ingest_back_s = wait_for(lambda: fleet.totals()["batches_sent"] > sent, 60)
            wanted = {h: FAULTS[k][3] for h, k in faulted.items()} | {LATE: "gpu-critical-xid"}
            if baseline:
                wanted[BASE] = "gpu-critical-xid"
            got = wait_for(lambda: (LATE, "gpu-critical-xid") in pages(hook.bodies()), 90)
            result.paged_after_s = None if got is None else time.monotonic() - last_drop
            wait_for(lambda: page_check(pages(hook.bodies()), wanted)[0] == 0, 60)
            time.sleep(quiet_s)  # a second page of any fault (the next ticks) would come by now
            result.ready_after = httpx.get(f"{server.url}/readyz", timeout=10).status_code == 200
            result.server_pid_same = server.proc is not None and server.proc.pid == pid
            result.server_pid_same &= server.proc is not None and server.proc.poll() is None
        finally:
            fleet.stop(timeout_s=30)
        try:
            for agent in fleet.agents.values():
                agent.push_pending(ignore_backoff=True)
            totals = fleet.totals()
            result.generated = totals["samples_generated"]
            result.acked = totals["samples_acked"]
            result.dropped_batches = totals["batches_dropped"]
            result.rows, result.distinct = stored_samples(db_url)
            result.missing, result.doubled, result.unwanted = page_check(
                pages(hook.bodies()), wanted
            )
        finally:
            server.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=12, help="simulated 8-GPU agents")
    parser.add_argument("--drops", type=int, default=20, help="times every session is ended")
    parser.add_argument("--every", type=float, default=0.5, help="mean seconds between drops")
    parser.add_argument(
        "--hunts", type=int, default=6, help="drops aimed at an alert/notify statement"
    )
    parser.add_argument("--port", type=int, default=None, help="server port (default: free)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the agents' retry warnings are expected here
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-pgdrop-") as tmp:
        r = run(
            url,
            Path(tmp),
            nodes=args.nodes,
            drops=args.drops,
            every_s=args.every,
            hunts=args.hunts,
            port=args.port,
        )
    print(
        summary(
            "Postgres connections dropped (pg_terminate_backend) during ingest and evaluation",
            [
                ("agents x GPUs", f"{args.nodes + 2} x 8 ({args.nodes // 2} with a fault)"),
                ("drops at random / aimed at evaluation", f"{r.drops} / {r.hunted}"),
                (
                    "sessions ended (active, alert/notify)",
                    f"{r.sessions} ({r.active}, {r.alerting})",
                ),
                ("pushes failed (5xx / dropped), resent", r.push_failures),
                ("samples produced / acked", f"{r.generated} / {r.acked}"),
                ("rows stored / distinct keys", f"{r.rows} / {r.distinct}"),
                ("batches dropped by agents", r.dropped_batches),
                ("LOST (produced - stored)", r.lost),
                ("pages missing / doubled / unwanted", f"{r.missing} / {r.doubled} / {r.unwanted}"),
                ("server restarted", "no" if r.server_pid_same else "YES (or died)"),
                ("/readyz after", 200 if r.ready_after else "not ready"),
                ("ingest back after last drop, s", _s(r.ingest_back_s)),
                ("new fault paged after last drop, s", _s(r.paged_after_s)),
                ("(a fault paged before any drop, s)", _s(r.baseline_page_s)),
            ],
        )
    )
    ok = r.lost == 0 and r.missing == r.doubled == 0 and r.server_pid_same
    return 0 if ok else 1


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    sys.exit(main())
