"""Fault: schedulers started twice by mistake on one Postgres database.

Two ``fleetwatch worker`` processes and two servers, one ``--no-jobs`` and one that runs the
jobs too (three schedulers of the same jobs in all), share a fresh database. Simulated agents
push to both servers; faults are injected on some nodes (each must page exactly once through a
local webhook receiver) and other nodes are moved to ``remediating`` through the API (each must
run the remediation hook exactly once: the hook appends the hostname to a file, after a second's
sleep to widen any race). Once the faults are injected, one worker is killed with ``kill -9``
(the survivors take over its leader lock and the pages pending). A worker killed while a hook
runs leaves that action to be run again after its lease: at least once by design, so the kill
comes before the remediation moves.

Prints: pages missing / doubled / unwanted, hook runs per remediated node (1 each), actions not
``succeeded``, samples lost.

    python bench/faults/two_schedulers.py [--nodes 8] [--remediate 4]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

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
    WorkerProcess,
    fresh_database,
    stored_samples,
    summary,
    wait_for,
)

AGENT_OPTIONS = {"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0}


@dataclass
class SchedulersResult:
    """What one run measured."""

    missing: int = 0
    doubled: int = 0
    unwanted: int = 0
    hook_runs: Counter[str] = field(default_factory=Counter)
    remediated: list[str] = field(default_factory=list)
    actions_not_succeeded: int = 0
    actions: int = 0
    generated: int = 0
    distinct: int = 0
    rows: int = 0
    paged_s: float | None = None

    @property
    def hook_doubles(self) -> int:
        """Hook runs beyond one per remediated node, plus runs for nodes not remediated."""
        extra = sum(n - 1 for n in self.hook_runs.values() if n > 1)
        return extra + sum(n for h, n in self.hook_runs.items() if h not in self.remediated)

    @property
    def hook_missing(self) -> int:
        """Remediated nodes whose hook never ran."""
        return sum(1 for h in self.remediated if self.hook_runs[h] == 0)


def run(
    db_url: str,
    work: Path,
    *,
    nodes: int = 8,
    remediate: int = 4,
    quiet_s: float = 8.0,
) -> SchedulersResult:
    """Run the fault on ``db_url`` (migrated, empty); logs and spools under ``work``."""
    result = SchedulersResult()
    hook_log = work / "hook.log"
    env = dict(SERVER_ENV)
    env["FLEETWATCH_REMEDIATION_HOOK"] = f"/bin/sh -c 'sleep 1; echo {{hostname}} >> {hook_log}'"
    env["FLEETWATCH_ACTION_WORKER_INTERVAL_S"] = "0.5"
    kinds = list(FAULTS)
    hosts = [f"twice-{i:03d}" for i in range(nodes + remediate)]
    faulted = {h: kinds[i % len(kinds)] for i, h in enumerate(hosts[:nodes:2])}
    result.remediated = hosts[nodes:]
    with receiver() as hook:
        prepare_alerting(db_url, hook.url + "/hook")
        web = ServerProcess(db_url, free_port(), work / "web.log", jobs=False, env=env)
        web_jobs = ServerProcess(db_url, free_port(), work / "web-jobs.log", env=env)
        workers = [WorkerProcess(db_url, work / f"worker-{i}.log", env) for i in (1, 2)]
        fleets: list[SimFleet] = []
        try:
            for w in workers:
                w.start()
            web.start()
            web_jobs.start()
            for n, server in enumerate((web, web_jobs)):
                mine = hosts[n::2]
                fleet = SimFleet(
                    [FleetNode(h, create_token(db_url, h), 8, {"cluster": "x2"}) for h in mine],
                    server_url=server.url,
                    spool_root=work / f"spool-{n}",
                    interval_s=0.5,
                    batch_interval_s=0.5,
                    agent_options=AGENT_OPTIONS,
                    seed=n + 1,
                )
                fleet.start()
                fleets.append(fleet)
            by_host = {h: f for f in fleets for h in f.agents}
            time.sleep(5.0)  # every node reports, the rules settle
            injected = time.monotonic()
            for host, kind in faulted.items():
                fault, index, xid, _ = FAULTS[kind]
                by_host[host].inject(host, fault, index, 600.0, xid)
            # A scheduler dies mid-run, with pages pending: the others take its locks over.
            # (Before the remediation moves: a worker killed while its hook runs leaves the
            # action to be run again after its lease, at least once by design, not exactly.)
            workers[0].kill()
            for i, host in enumerate(result.remediated):
                url = (web, web_jobs)[i % 2].url
                for state in ("quarantined", "remediating"):
                    moved = web.api.post(
                        f"{url}/api/v1/nodes/{host}/lifecycle",
                        json={"to_state": state, "reason": "fault script", "actor": "bench"},
                        timeout=30,
                    )
                    moved.raise_for_status()
            wanted = {h: FAULTS[k][3] for h, k in faulted.items()}
            wait_for(lambda: page_check(pages(hook.bodies()), wanted)[0] == 0, 90)
            result.paged_s = time.monotonic() - injected
            wait_for(lambda: _hook_runs(hook_log).total() >= len(result.remediated), 60)
            wait_for(lambda: _actions_done(web, result.remediated), 60, step_s=1.0)
            time.sleep(quiet_s)  # a second page or hook run would come by now
            result.missing, result.doubled, result.unwanted = page_check(
                pages(hook.bodies()), wanted
            )
            result.hook_runs = _hook_runs(hook_log)
            for host in result.remediated:
                life = web.api.get(f"{web.url}/api/v1/nodes/{host}/lifecycle", timeout=30).json()
                for action in life["actions"]:
                    result.actions += 1
                    result.actions_not_succeeded += action["status"] != "succeeded"
        finally:
            for fleet in fleets:
                fleet.stop(timeout_s=30)
            try:
                for fleet in fleets:
                    for agent in fleet.agents.values():
                        agent.push_pending(ignore_backoff=True)
                result.generated = sum(f.totals()["samples_generated"] for f in fleets)
                result.rows, result.distinct = stored_samples(db_url)
            finally:
                for process in (web, web_jobs, *workers):
                    process.stop()
    return result


def _actions_done(web: ServerProcess, hosts: list[str]) -> bool:
    """Whether every action of ``hosts`` has ended (succeeded or failed, not queued or
    running): a loaded machine commits a hook's outcome a while after the hook wrote its line."""
    for host in hosts:
        life = web.api.get(f"{web.url}/api/v1/nodes/{host}/lifecycle", timeout=30).json()
        if any(a["status"] not in ("succeeded", "failed") for a in life["actions"]):
            return False
    return True


def _hook_runs(path: Path) -> Counter[str]:
    try:
        return Counter(path.read_text().split())
    except FileNotFoundError:
        return Counter()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8, help="agents (every other one faulted)")
    parser.add_argument("--remediate", type=int, default=4, help="nodes moved to remediating")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-twice-") as tmp:
        r = run(url, Path(tmp), nodes=args.nodes, remediate=args.remediate)
    print(
        summary(
            "two workers + a second server with jobs on one Postgres (one worker killed -9)",
            [
                ("faulted nodes / remediated nodes", f"{args.nodes // 2} / {args.remediate}"),
                ("pages missing / doubled / unwanted", f"{r.missing} / {r.doubled} / {r.unwanted}"),
                ("every fault paged within, s", "-" if r.paged_s is None else f"{r.paged_s:.1f}"),
                ("hook runs missing / extra", f"{r.hook_missing} / {r.hook_doubles}"),
                ("actions / not succeeded", f"{r.actions} / {r.actions_not_succeeded}"),
                (
                    "samples produced / stored (keys) / rows",
                    f"{r.generated} / {r.distinct} / {r.rows}",
                ),
                ("LOST (produced - stored)", r.generated - r.distinct),
            ],
        )
    )
    ok = (r.missing, r.doubled, r.hook_missing, r.hook_doubles) == (0, 0, 0, 0)
    return 0 if ok and r.generated == r.distinct == r.rows else 1


if __name__ == "__main__":
    sys.exit(main())
